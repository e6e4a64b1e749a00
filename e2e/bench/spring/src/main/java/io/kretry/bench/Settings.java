package io.kretry.bench;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * What the bench passes on the command line, as key=value arguments:
 * mode (retry-topic | blocking), brokers (host:port,…), topic, group,
 * partitions (of the source topic; the retry topics and the DLT get as
 * many), classes (a file holding one class byte per record index),
 * fetch-max-wait-ms, backoff-ms (the retry delays, comma-separated:
 * 100,200,400 as kretry's tiers).
 */
record Settings(String mode, String brokers, String topic, String group, int partitions,
                String classes, int fetchMaxWaitMs, long[] backoffMs) {

    static Settings parse(String[] args) {
        Map<String, String> kv = new HashMap<>();
        for (String a : args) {
            int eq = a.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("argument \"" + a + "\": want key=value");
            }
            kv.put(a.substring(0, eq), a.substring(eq + 1));
        }
        Settings s = new Settings(need(kv, "mode"), need(kv, "brokers"), need(kv, "topic"), need(kv, "group"),
                Integer.parseInt(need(kv, "partitions")), need(kv, "classes"),
                Integer.parseInt(need(kv, "fetch-max-wait-ms")),
                Arrays.stream(need(kv, "backoff-ms").split(",")).mapToLong(Long::parseLong).toArray());
        if (!s.mode.equals("retry-topic") && !s.mode.equals("blocking")) {
            throw new IllegalArgumentException("mode=" + s.mode + ": want retry-topic or blocking");
        }
        if (s.backoffMs.length == 0) {
            throw new IllegalArgumentException("backoff-ms: want at least one delay");
        }
        return s;
    }

    private static String need(Map<String, String> kv, String key) {
        String v = kv.get(key);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("missing argument " + key + "=…");
        }
        return v;
    }

    long firstBackoff() { return backoffMs[0]; }

    long lastBackoff() { return backoffMs[backoffMs.length - 1]; }

    /** Retries after the first attempt: one per delay. */
    int retries() { return backoffMs.length; }
}

package io.kretry.bench;

import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicIntegerArray;

/**
 * The application every bench peer delivers to, as e2e/bench/workload.go's
 * {@code app.handle}: decode the record index from the value, count the
 * call, answer by the record's class. Every decision is sent to the bench
 * as an {@link Events} frame, which does the bookkeeping (latency,
 * lateness, settled records) exactly as for the Go peers.
 *
 * <p>Classes (workload.go): 0 acknowledge; 1 fail permanently on every
 * attempt; 2 fail transiently on the first attempt, then acknowledge; 3
 * sleep 200 ms, then acknowledge.
 */
final class App {
    static final byte OK = 0, PERMANENT = 1, TRANSIENT = 2, SLOW = 3;
    static final long SLOW_MS = 200;

    private final byte[] classes;
    private final AtomicIntegerArray calls;
    private final Events events;

    App(byte[] classes, Events events) {
        this.classes = classes;
        this.calls = new AtomicIntegerArray(classes.length);
        this.events = events;
    }

    /** A permanent failure: the peer dead-letters the record at once. */
    static final class PermanentException extends RuntimeException {
        PermanentException(String msg) { super(msg); }
    }

    /** A transient failure: the peer retries the record. */
    static final class TransientException extends RuntimeException {
        TransientException(String msg) { super(msg); }
    }

    /** Handles one record value; returns normally for an acknowledgement. */
    void handle(byte[] value) throws InterruptedException {
        long now = Events.now();
        if (value == null || value.length < 16) {
            throw new PermanentException("value shorter than 16 bytes");
        }
        long idx = ByteBuffer.wrap(value).getLong(0); // big endian, as encode() writes it
        if (idx < 0 || idx >= classes.length) {
            throw new PermanentException("record index " + idx + " out of range");
        }
        int i = (int) idx;
        int n = calls.incrementAndGet(i);
        events.emit(Events.CALL, i, now);
        switch (classes[i]) {
            case PERMANENT -> {
                events.emit(Events.PERMANENT, i, now);
                throw new PermanentException("record " + i + ": permanent failure");
            }
            case TRANSIENT -> {
                if (n == 1) {
                    events.emit(Events.TRANSIENT, i, Events.now());
                    throw new TransientException("record " + i + ": transient failure");
                }
            }
            case SLOW -> {
                Thread.sleep(SLOW_MS);
                now = Events.now();
            }
            default -> { }
        }
        events.emit(Events.ACK, i, now);
    }
}

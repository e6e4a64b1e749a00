package io.kretry.bench;

import java.io.BufferedOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.time.Instant;

/**
 * The application's decisions, streamed to the bench on stdout as 13-byte
 * frames: kind (1 byte), record index (int32, big endian), Unix time in ns
 * (int64, big endian). The bench reads them while the run goes on; the
 * times are the application's, so a frame that reaches the bench late
 * changes no figure. Flushed every 2 ms and when the buffer is full.
 */
final class Events implements AutoCloseable {
    static final byte CALL = 'C', ACK = 'A', PERMANENT = 'P', TRANSIENT = 'T';

    private final DataOutputStream out;
    private final Thread flusher;
    private volatile boolean closed;

    Events(OutputStream raw) {
        out = new DataOutputStream(new BufferedOutputStream(raw, 1 << 16));
        flusher = new Thread(this::flushLoop, "bench-events-flush");
        flusher.setDaemon(true);
        flusher.start();
    }

    /** Unix time in ns from the wall clock (µs precision on Linux). */
    static long now() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }

    synchronized void emit(byte kind, int index, long unixNanos) {
        try {
            out.writeByte(kind);
            out.writeInt(index);
            out.writeLong(unixNanos);
        } catch (IOException e) {
            throw new IllegalStateException("bench events: " + e.getMessage(), e);
        }
    }

    private synchronized void flush() {
        try {
            out.flush();
        } catch (IOException e) {
            closed = true;
        }
    }

    private void flushLoop() {
        while (!closed) {
            flush();
            try {
                Thread.sleep(2);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    @Override
    public void close() {
        closed = true;
        flusher.interrupt();
        flush();
    }
}

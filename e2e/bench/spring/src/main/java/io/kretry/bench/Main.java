package io.kretry.bench;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.nio.file.Files;
import java.nio.file.Path;

import org.springframework.context.annotation.AnnotationConfigApplicationContext;

/**
 * Starts one Spring Kafka peer for the bench (e2e/bench/spring.go starts it
 * as a subprocess): builds the application context for the mode, says
 * "ready" on stderr once the listener containers are started, streams the
 * application's decisions on stdout ({@link Events}) and stops cleanly
 * when stdin closes.
 */
public final class Main {
    private Main() { }

    public static void main(String[] args) throws Exception {
        Settings s;
        try {
            s = Settings.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("spring peer: " + e.getMessage());
            System.exit(2);
            return;
        }
        byte[] classes = Files.readAllBytes(Path.of(s.classes()));
        Events events = new Events(new FileOutputStream(FileDescriptor.out));
        System.setOut(System.err); // stdout carries only event frames
        App app = new App(classes, events);

        var ctx = new AnnotationConfigApplicationContext();
        ctx.registerBean("settings", Settings.class, () -> s);
        ctx.registerBean(App.class, () -> app);
        ctx.register(Common.class, s.mode().equals("retry-topic") ? RetryTopicPeer.class : BlockingPeer.class);
        ctx.refresh();
        System.err.println("ready");

        while (System.in.read() != -1) {
            // the bench closes stdin to stop the peer
        }
        ctx.close();
        events.close();
        System.exit(0);
    }
}

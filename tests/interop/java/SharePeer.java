/*
 * An interoperability peer for the queues recipe's tests: Kafka's own KafkaShareConsumer
 * (share.acknowledgement.mode=explicit) in a share group with this library's ShareConsumer,
 * reporting what the broker confirmed as JSON lines on stdout. Driven by
 * tests/interop/peers.py (start_java_share_peer).
 *
 * Usage: java SharePeer --bootstrap HOST:PORT --group G --topics T1,T2
 *            [--client-id ID] [--poll-ms 100] [--max-poll-records 500]
 *            [--release-every K] [--stop-after N]
 *
 * Each record it gets is acknowledged one by one: RELEASE if --release-every K is given, the
 * record is at its first delivery and its offset is a multiple of K; ACCEPT otherwise. After
 * each poll commitSync sends the acknowledgements, and only the partitions the broker
 * confirmed are reported as done. With --stop-after N it stops polling once it has had N
 * records (it stays a member, holding nothing), so that what it released goes to others.
 *
 * Events, one JSON object a line, each with "t" (epoch milliseconds, fractional):
 *   {"event":"started"}
 *   {"event":"accepted"|"released","records":[["t",0,offset,delivery_count],...]}
 *   {"event":"ack_failed","records":[...],"error":"..."}  not applied: they come back
 *   {"event":"idle","records":N}                          --stop-after reached
 *   {"event":"error","error":"..."}
 *   {"event":"closed"}
 *
 * SIGTERM closes the consumer cleanly (the shutdown hook wakes the polling thread and waits
 * for it): the share sessions end and the member leaves the group.
 */

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class SharePeer {

    private static final Object OUT = new Object();

    private final KafkaShareConsumer<byte[], byte[]> consumer;
    private final List<String> topics;
    private final Duration pollTimeout;
    private final long releaseEvery;
    private final long stopAfter;
    private long handled;
    private volatile boolean stopping;

    private SharePeer(Map<String, String> opts) {
        topics = List.of(require(opts, "topics").split(","));
        pollTimeout = Duration.ofMillis(Long.parseLong(opts.getOrDefault("poll-ms", "100")));
        releaseEvery = Long.parseLong(opts.getOrDefault("release-every", "0"));
        stopAfter = Long.parseLong(opts.getOrDefault("stop-after", "0"));
        Properties props = new Properties();
        props.put("bootstrap.servers", require(opts, "bootstrap"));
        props.put("group.id", require(opts, "group"));
        props.put("client.id", opts.getOrDefault("client-id", "java-share-peer"));
        props.put("share.acknowledgement.mode", "explicit");
        props.put("max.poll.records", opts.getOrDefault("max-poll-records", "500"));
        // The heartbeat interval, the session and where a new group starts are the share
        // group's (broker and group configs): a share consumer refuses those settings.
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        consumer = new KafkaShareConsumer<>(props);
    }

    private static String require(Map<String, String> opts, String key) {
        String value = opts.get(key);
        if (value == null) {
            throw new IllegalArgumentException("missing --" + key);
        }
        return value;
    }

    // -- output (the same JSON lines as PeerConsumer's) -----------------------------------

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    static void emit(String event, String fields) {
        Instant now = Instant.now();
        double t = now.getEpochSecond() * 1000.0 + now.getNano() / 1_000_000.0;
        String line = "{\"event\":" + quote(event) + (fields.isEmpty() ? "" : "," + fields)
            + ",\"t\":" + String.format(Locale.ROOT, "%.3f", t) + "}";
        // The polling thread and the shutdown hook may both print; lines must not interleave.
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static String records(List<ConsumerRecord<byte[], byte[]>> records) {
        List<String> items = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : records) {
            int deliveries = r.deliveryCount().map(Number::intValue).orElse(-1);
            items.add("[" + quote(r.topic()) + "," + r.partition() + "," + r.offset() + ","
                + deliveries + "]");
        }
        return "\"records\":[" + String.join(",", items) + "]";
    }

    // -- the loop ------------------------------------------------------------------------

    /** A partition's records of one poll, by how they were acknowledged. */
    private static final class Acked {
        final List<ConsumerRecord<byte[], byte[]>> accepted = new ArrayList<>();
        final List<ConsumerRecord<byte[], byte[]>> released = new ArrayList<>();
    }

    private AcknowledgeType decide(ConsumerRecord<byte[], byte[]> r) {
        boolean first = r.deliveryCount().map(Number::intValue).orElse(1) == 1;
        if (releaseEvery > 0 && first && r.offset() % releaseEvery == 0) {
            return AcknowledgeType.RELEASE;
        }
        return AcknowledgeType.ACCEPT;
    }

    private void run() {
        consumer.subscribe(topics);
        emit("started", "");
        while (!stopping) {
            if (stopAfter > 0 && handled >= stopAfter) {
                emit("idle", "\"records\":" + handled);
                waitForShutdown();
                return;
            }
            ConsumerRecords<byte[], byte[]> polled;
            try {
                polled = consumer.poll(pollTimeout);
            } catch (WakeupException e) {
                continue;  // the shutdown hook; the loop condition decides
            } catch (RuntimeException e) {
                emit("error", "\"error\":" + quote(e.toString()));
                continue;
            }
            if (polled.isEmpty()) {
                continue;
            }
            Map<TopicPartition, Acked> acked = new LinkedHashMap<>();
            for (ConsumerRecord<byte[], byte[]> r : polled) {
                AcknowledgeType type = decide(r);
                consumer.acknowledge(r, type);
                Acked a = acked.computeIfAbsent(
                    new TopicPartition(r.topic(), r.partition()), k -> new Acked());
                (type == AcknowledgeType.RELEASE ? a.released : a.accepted).add(r);
                handled++;
            }
            commit(acked);
        }
    }

    /** Sends this poll's acknowledgements and reports, per partition, what took effect. */
    private void commit(Map<TopicPartition, Acked> acked) {
        Map<TopicPartition, Optional<KafkaException>> outcome = new HashMap<>();
        String failure = null;
        try {
            for (var e : consumer.commitSync().entrySet()) {
                TopicIdPartition tip = e.getKey();
                outcome.put(tip.topicPartition(), e.getValue());
            }
        } catch (RuntimeException e) {
            // WakeupException (the shutdown hook) or another failure: nothing is known.
            failure = e.toString();
        }
        for (var e : acked.entrySet()) {
            Acked a = e.getValue();
            Optional<KafkaException> result = outcome.get(e.getKey());
            if (failure == null && result != null && result.isEmpty()) {
                if (!a.accepted.isEmpty()) {
                    emit("accepted", records(a.accepted));
                }
                if (!a.released.isEmpty()) {
                    emit("released", records(a.released));
                }
                continue;
            }
            String error = failure != null ? failure
                : result == null ? "no outcome for the partition" : result.get().toString();
            List<ConsumerRecord<byte[], byte[]>> all = new ArrayList<>(a.accepted);
            all.addAll(a.released);
            emit("ack_failed", records(all) + ",\"error\":" + quote(error));
        }
    }

    private synchronized void waitForShutdown() {
        while (!stopping) {
            try {
                wait(100);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    private void close() {
        try {
            // Ends the share sessions (releasing anything still held) and leaves the group.
            consumer.close(Duration.ofSeconds(10));
        } catch (RuntimeException e) {
            emit("error", "\"error\":" + quote(e.toString()));
        }
        emit("closed", "");
    }

    private static Map<String, String> parse(String[] args) {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("expected --name value pairs, got " + args[i]);
            }
            opts.put(args[i].substring(2), args[i + 1]);
        }
        return opts;
    }

    /**
     * Halts the JVM once the process that started it is gone (a killed test run), which shows
     * as a new parent: the peer runs in a session of its own, so nothing else would stop it.
     * Halted, not exited: nobody reads its events or waits for its clean leave.
     */
    static void exitWhenOrphaned() {
        long parent = parentPid();
        Thread watch = new Thread(() -> {
            while (parentPid() == parent) {
                try {
                    Thread.sleep(500);
                } catch (InterruptedException e) {
                    return;
                }
            }
            Runtime.getRuntime().halt(3);
        }, "orphan-watch");
        watch.setDaemon(true);
        watch.start();
    }

    static long parentPid() {
        return ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L);
    }

    public static void main(String[] args) throws Exception {
        exitWhenOrphaned();
        SharePeer peer;
        try {
            peer = new SharePeer(parse(args));
        } catch (RuntimeException e) {
            emit("error", "\"error\":" + quote(e.toString()));
            System.exit(2);
            return;
        }
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            peer.stopping = true;
            peer.consumer.wakeup();
            try {
                // The JVM halts when the hooks return: wait for close() to finish.
                main.join(30_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "shutdown"));
        try {
            peer.run();
        } finally {
            peer.close();
        }
    }
}

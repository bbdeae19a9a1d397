/*
 * An interoperability peer for the partitioning recipe's tests: Kafka's own Java
 * KafkaConsumer (classic group protocol) in a group shared with this library's members,
 * reporting everything it does as JSON lines on stdout. Driven by tests/interop/peers.py.
 *
 * Usage: java PeerConsumer --bootstrap HOST:PORT --group G --topics T1,T2
 *            [--assignor range|cooperative-sticky|range,cooperative-sticky]
 *            [--client-id ID] [--session-timeout-ms 6000] [--heartbeat-interval-ms 500]
 *            [--max-poll-interval-ms 30000] [--group-instance-id ID] [--poll-ms 100]
 *            [--max-poll-records 500]
 *
 * Events, one JSON object a line, each with "t" (epoch milliseconds, fractional):
 *   {"event":"started","member_id":...}
 *   {"event":"assigned"|"revoked"|"lost","partitions":[["t",0],...],"generation":G,...}
 *   {"event":"records","partitions":[["t",0,first_offset,last_offset,count],...]}
 *   {"event":"committed","offsets":[["t",0,next_offset],...]}
 *   {"event":"commit_failed","error":"..."}
 *   {"event":"led","assignor":"range","members":N,"assignment":{member_id:[["t",0],...]}}
 *   {"event":"error","error":"..."}
 *   {"event":"closed"}
 * The times of "assigned" are taken when the callback starts and those of "revoked" and
 * "lost" when it ends: ownership is then over-, never under-estimated, which is what a
 * check that no partition had two owners at once needs.
 *
 * SIGTERM closes the consumer cleanly (the shutdown hook wakes the polling thread and
 * waits for it), so the group sees a LeaveGroup and the revocation callbacks run.
 */

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupAssignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class PeerConsumer implements ConsumerRebalanceListener {

    private static final Object OUT = new Object();

    private final KafkaConsumer<byte[], byte[]> consumer;
    private final List<String> topics;
    private final Duration pollTimeout;
    private volatile boolean stopping;

    private PeerConsumer(Map<String, String> opts) {
        topics = List.of(require(opts, "topics").split(","));
        pollTimeout = Duration.ofMillis(Long.parseLong(opts.getOrDefault("poll-ms", "100")));
        Properties props = new Properties();
        props.put("bootstrap.servers", require(opts, "bootstrap"));
        props.put("group.id", require(opts, "group"));
        props.put("client.id", opts.getOrDefault("client-id", "java-peer"));
        String protocol = opts.getOrDefault("group-protocol", "classic");
        props.put("group.protocol", protocol);
        if (protocol.equals("consumer")) {
            // KIP-848: the broker assigns and sets the session and heartbeat; Java refuses
            // the classic protocol's settings with it.
            props.put("group.remote.assignor", "uniform");
        } else {
            props.put("partition.assignment.strategy", assignorClasses(
                opts.getOrDefault("assignor", "cooperative-sticky")));
            props.put("session.timeout.ms", opts.getOrDefault("session-timeout-ms", "6000"));
            props.put("heartbeat.interval.ms", opts.getOrDefault("heartbeat-interval-ms", "500"));
        }
        props.put("max.poll.interval.ms", opts.getOrDefault("max-poll-interval-ms", "30000"));
        props.put("max.poll.records", opts.getOrDefault("max-poll-records", "500"));
        if (opts.containsKey("group-instance-id")) {
            props.put("group.instance.id", opts.get("group-instance-id"));
        }
        // Records produced before this peer joined must be seen too; commits are ours alone.
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        consumer = new KafkaConsumer<>(props);
    }

    private static String require(Map<String, String> opts, String key) {
        String value = opts.get(key);
        if (value == null) {
            throw new IllegalArgumentException("missing --" + key);
        }
        return value;
    }

    /**
     * The logging subclasses of the standard assignors, in the order given. The order is the
     * preference order sent in JoinGroup: "range,cooperative-sticky" is the first step of
     * Kafka's documented rolling upgrade from eager to cooperative rebalancing.
     */
    private static String assignorClasses(String spec) {
        List<String> classes = new ArrayList<>();
        for (String name : spec.split(",")) {
            switch (name.trim()) {
                case "range":
                    classes.add(LoggingRangeAssignor.class.getName());
                    break;
                case "cooperative-sticky":
                    classes.add(LoggingCooperativeStickyAssignor.class.getName());
                    break;
                default:
                    throw new IllegalArgumentException("unknown assignor " + name);
            }
        }
        return String.join(",", classes);
    }

    // -- output --------------------------------------------------------------------------

    static double now() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1000.0 + t.getNano() / 1_000_000.0;
    }

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

    static String partitions(Collection<TopicPartition> partitions) {
        List<String> items = new ArrayList<>();
        for (TopicPartition tp : partitions) {
            items.add("[" + quote(tp.topic()) + "," + tp.partition() + "]");
        }
        return "[" + String.join(",", items) + "]";
    }

    /** Prints one event; {@code fields} is the JSON text of the fields after "event". */
    static void emit(String event, String fields, double t) {
        String line = "{\"event\":" + quote(event) + (fields.isEmpty() ? "" : "," + fields)
            + ",\"t\":" + String.format(Locale.ROOT, "%.3f", t) + "}";
        // The polling thread and the shutdown hook may both print; lines must not interleave.
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static void emit(String event, String fields) {
        emit(event, fields, now());
    }

    private String membership() {
        // Read on the polling thread only (callbacks run there): the consumer is not
        // thread-safe.
        var metadata = consumer.groupMetadata();
        return "\"generation\":" + metadata.generationId()
            + ",\"member_id\":" + quote(metadata.memberId());
    }

    // -- leadership: the standard assignors, announcing each time they run ----------------

    static GroupAssignment logged(String assignor,
            GroupSubscription subscription, GroupAssignment assignment, double t) {
        List<String> members = new ArrayList<>();
        for (var entry : new TreeMap<>(assignment.groupAssignment()).entrySet()) {
            members.add(quote(entry.getKey()) + ":" + partitions(entry.getValue().partitions()));
        }
        emit("led", "\"assignor\":" + quote(assignor)
            + ",\"members\":" + subscription.groupSubscription().size()
            + ",\"assignment\":{" + String.join(",", members) + "}", t);
        return assignment;
    }

    /** RangeAssignor that reports when this member assigns; name() stays "range". */
    public static final class LoggingRangeAssignor extends RangeAssignor {
        @Override
        public GroupAssignment assign(Cluster metadata, GroupSubscription subscription) {
            double t = now();
            return logged(name(), subscription, super.assign(metadata, subscription), t);
        }
    }

    /** CooperativeStickyAssignor that reports when it runs; name() stays "cooperative-sticky". */
    public static final class LoggingCooperativeStickyAssignor extends CooperativeStickyAssignor {
        @Override
        public GroupAssignment assign(Cluster metadata, GroupSubscription subscription) {
            double t = now();
            return logged(name(), subscription, super.assign(metadata, subscription), t);
        }
    }

    // -- the rebalance listener (runs on the polling thread, inside poll or close) ---------

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        emit("assigned", "\"partitions\":" + partitions(partitions) + "," + membership());
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        // Every batch is committed right after it was processed, so nothing is pending here.
        emit("revoked", "\"partitions\":" + partitions(partitions) + "," + membership());
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
        emit("lost", "\"partitions\":" + partitions(partitions) + "," + membership());
    }

    // -- the loop ------------------------------------------------------------------------

    private void run() {
        consumer.subscribe(topics, this);
        emit("started", "\"topics\":[" + String.join(",", topics.stream().map(
            PeerConsumer::quote).toList()) + "]");
        while (!stopping) {
            ConsumerRecords<byte[], byte[]> records;
            try {
                records = consumer.poll(pollTimeout);
            } catch (WakeupException e) {
                continue;  // the shutdown hook; the loop condition decides
            } catch (RuntimeException e) {
                emit("error", "\"error\":" + quote(e.toString()));
                continue;
            }
            if (records.isEmpty()) {
                continue;
            }
            // first offset, last offset, count per partition, in partition order.
            Map<TopicPartition, long[]> seen = new LinkedHashMap<>();
            for (ConsumerRecord<byte[], byte[]> r : records) {
                TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                long[] range = seen.computeIfAbsent(tp, k -> new long[] {r.offset(), 0, 0});
                range[1] = r.offset();
                range[2]++;
            }
            List<String> items = new ArrayList<>();
            Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
            for (var e : seen.entrySet()) {
                long[] range = e.getValue();
                items.add("[" + quote(e.getKey().topic()) + "," + e.getKey().partition() + ","
                    + range[0] + "," + range[1] + "," + range[2] + "]");
                offsets.put(e.getKey(), new OffsetAndMetadata(range[1] + 1));
            }
            emit("records", "\"partitions\":[" + String.join(",", items) + "]");
            commit(offsets);
        }
    }

    /** Commits the positions after this batch: the offset of its last record + 1. */
    private void commit(Map<TopicPartition, OffsetAndMetadata> offsets) {
        try {
            consumer.commitSync(offsets);
        } catch (WakeupException e) {
            // The shutdown hook woke the consumer during the commit, which may or may not
            // have reached the broker: report it as failed, the loop ends next.
            emit("commit_failed", "\"error\":" + quote(e.toString()));
            return;
        } catch (RuntimeException e) {
            // CommitFailedException / RebalanceInProgressException: a rebalance got in the
            // way. The records are consumed again by whoever owns them next (at least once).
            emit("commit_failed", "\"error\":" + quote(e.toString()));
            return;
        }
        List<String> items = new ArrayList<>();
        for (var e : offsets.entrySet()) {
            items.add("[" + quote(e.getKey().topic()) + "," + e.getKey().partition() + ","
                + e.getValue().offset() + "]");
        }
        emit("committed", "\"offsets\":[" + String.join(",", items) + "]");
    }

    private void close() {
        try {
            // Runs the revocation callback and sends LeaveGroup (unless static membership).
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(10)));
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
        PeerConsumer peer;
        try {
            peer = new PeerConsumer(parse(args));
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

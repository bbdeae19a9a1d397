/*
 * Driver for benchmarks/rebalance_cost.py: the Java consumers of one group as threads of one
 * JVM (a thread per KafkaConsumer), each recording when it consumed what, so that the script
 * measures them exactly as it measures its own consumers.
 *
 * Usage: java RebalanceCost BOOTSTRAP SESSION_MS HEARTBEAT_MS MAX_POLL_MS POLL_MS
 *
 * Commands on stdin, one per line; each answer is one JSON line:
 *   start GROUP TOPIC PROTOCOL N   N consumers (PROTOCOL: consumer | classic) -> {"started":N}
 *   join                           -> {"t0":MS}, then one more consumer starts
 *   leave INDEX                    consumer INDEX stops polling and closes (on its own
 *                                  thread) -> {"t0":MS}, read just before close()
 *   status                         -> {"status":{"INDEX":{"PARTITION":LAST_TS,...},...}}
 *                                     each open consumer's partitions, with the timestamp of
 *                                     the newest record it consumed from each (-1: none yet)
 *   dump SINCE_MS                  -> {"dump":{"events":[[MS,INDEX,KIND,[P,...]],...],
 *                                     "consumed":[[INDEX,P,[[MS,TS],...]],...]}}
 *                                     every ownership change, and each poll's newest record
 *                                     timestamp per partition, from SINCE_MS on
 *   stop                           closes every consumer -> {"stopped":true}
 *   drain GROUP TOPIC PROTOCOL TOTAL   one consumer reads TOTAL records from the start
 *                                     -> {"drained":RECORDS_PER_S} (between 10% and 90% read)
 *   quit
 * A consumer that fails prints {"error":"..."}.
 * MS are epoch milliseconds (fractional) read here; TS are the records' own timestamps.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class RebalanceCost {

    private static final Object OUT = new Object();

    private final String bootstrap;
    private final String sessionMs;
    private final String heartbeatMs;
    private final String maxPollMs;
    private final Duration pollTimeout;
    private final List<Member> members = new ArrayList<>();
    // Ownership changes of every consumer of the group, in the order they happened.
    private final List<String> events = new ArrayList<>();
    private String group;
    private String topic;
    private String protocol;

    private RebalanceCost(String[] args) {
        bootstrap = args[0];
        sessionMs = args[1];
        heartbeatMs = args[2];
        maxPollMs = args[3];
        pollTimeout = Duration.ofMillis(Long.parseLong(args[4]));
    }

    static double now() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1000.0 + t.getNano() / 1_000_000.0;
    }

    static String ms(double t) {
        return String.format(Locale.ROOT, "%.3f", t);
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static void emit(String line) {
        // Consumer threads print concurrently; one line must never interleave with another.
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    private Properties settings(String groupId, String index) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", groupId);
        props.put("client.id", "rebalance-cost-" + index);
        props.put("group.protocol", protocol);
        if (protocol.equals("consumer")) {
            // KIP-848: the broker assigns and sets the session and the heartbeat interval;
            // Java refuses the classic settings with this protocol.
            props.put("group.remote.assignor", "uniform");
        } else {
            props.put("partition.assignment.strategy", CooperativeStickyAssignor.class.getName());
            props.put("session.timeout.ms", sessionMs);
            props.put("heartbeat.interval.ms", heartbeatMs);
        }
        props.put("max.poll.interval.ms", maxPollMs);
        // No commits anywhere: a moved partition starts at the end, as ours do.
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        return props;
    }

    /** One consumer and the thread that polls it (a KafkaConsumer is not thread-safe). */
    private final class Member implements Runnable, ConsumerRebalanceListener {
        private final int index;
        private final Thread thread;
        private volatile boolean stopping;
        private volatile boolean leaving;
        private volatile KafkaConsumer<byte[], byte[]> consumer;
        // Guarded by this: the partitions owned now, with the newest record timestamp
        // consumed from each, and every poll's consumption per partition: [ms, newest ts].
        private final Map<Integer, Long> owned = new TreeMap<>();
        private final Map<Integer, List<double[]>> consumed = new HashMap<>();

        Member(int index) {
            this.index = index;
            this.thread = new Thread(this, "member-" + index);
        }

        @Override
        public void run() {
            Properties props = settings(group, Integer.toString(index));
            props.put("auto.offset.reset", "latest");
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                consumer = c;
                c.subscribe(List.of(topic), this);
                while (!stopping) {
                    ConsumerRecords<byte[], byte[]> records;
                    try {
                        records = c.poll(pollTimeout);
                    } catch (WakeupException e) {
                        continue;  // leave() or stop(); the loop condition decides
                    }
                    if (records.isEmpty()) {
                        continue;
                    }
                    double t = now();
                    synchronized (this) {
                        for (TopicPartition tp : records.partitions()) {
                            long newest = -1;
                            for (ConsumerRecord<byte[], byte[]> r : records.records(tp)) {
                                newest = Math.max(newest, r.timestamp());
                            }
                            consumed.computeIfAbsent(tp.partition(), k -> new ArrayList<>())
                                .add(new double[] {t, newest});
                            if (owned.containsKey(tp.partition())) {
                                owned.put(tp.partition(), newest);
                            }
                        }
                    }
                }
                if (leaving) {
                    // The event is the close() call, which try-with-resources makes next.
                    emit("{\"t0\":" + ms(now()) + "}");
                }
            } catch (RuntimeException e) {
                if (!stopping) {
                    emit("{\"error\":" + quote("member " + index + ": " + e) + "}");
                }
            }
        }

        private void changed(String kind, Collection<TopicPartition> partitions) {
            double t = now();
            List<String> numbers = new ArrayList<>();
            synchronized (this) {
                for (TopicPartition tp : partitions) {
                    numbers.add(Integer.toString(tp.partition()));
                    if (kind.equals("assigned")) {
                        owned.put(tp.partition(), -1L);
                    } else {
                        owned.remove(tp.partition());
                    }
                }
            }
            synchronized (events) {
                events.add("[" + ms(t) + "," + index + "," + quote(kind) + ",["
                    + String.join(",", numbers) + "]]");
            }
        }

        // The listener runs on the polling thread, inside poll() (or close()).
        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            changed("assigned", partitions);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            changed("revoked", partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            changed("lost", partitions);
        }

        synchronized String status() {
            List<String> items = new ArrayList<>();
            for (var e : owned.entrySet()) {
                items.add("\"" + e.getKey() + "\":" + e.getValue());
            }
            return "\"" + index + "\":{" + String.join(",", items) + "}";
        }

        synchronized void dumpConsumed(double since, List<String> out) {
            for (var e : consumed.entrySet()) {
                List<String> points = new ArrayList<>();
                for (double[] p : e.getValue()) {
                    if (p[0] >= since) {
                        points.add("[" + ms(p[0]) + "," + (long) p[1] + "]");
                    }
                }
                out.add("[" + index + "," + e.getKey() + ",[" + String.join(",", points) + "]]");
            }
        }

        void stop() {
            stopping = true;
            KafkaConsumer<byte[], byte[]> c = consumer;
            if (c != null) {
                c.wakeup();
            }
        }
    }

    private void start(String groupId, String topicName, String protocolName, int count) {
        group = groupId;
        topic = topicName;
        protocol = protocolName;
        synchronized (events) {
            events.clear();
        }
        for (int i = 0; i < count; i++) {
            addMember();
        }
        emit("{\"started\":" + count + "}");
    }

    private void addMember() {
        Member member = new Member(members.size());
        members.add(member);
        member.thread.start();
    }

    private void leave(int index) {
        // The consumer closes on its polling thread (close() sends the leave request).
        Member m = members.get(index);
        m.leaving = true;
        m.stop();
    }

    private void status() {
        List<String> items = new ArrayList<>();
        for (Member m : members) {
            if (!m.stopping) {
                items.add(m.status());
            }
        }
        emit("{\"status\":{" + String.join(",", items) + "}}");
    }

    private void dump(double since) {
        List<String> consumed = new ArrayList<>();
        for (Member m : members) {
            m.dumpConsumed(since, consumed);
        }
        String changes;
        synchronized (events) {
            changes = String.join(",", events);
        }
        emit("{\"dump\":{\"events\":[" + changes + "],\"consumed\":["
            + String.join(",", consumed) + "]}}");
    }

    private void stopAll() throws InterruptedException {
        // Signal all first, then wait: the consumers leave the group in parallel.
        for (Member m : members) {
            m.stop();
        }
        for (Member m : members) {
            m.thread.join(60_000);
        }
        members.clear();
    }

    /** Reads TOTAL records with one consumer; records/s between 10% and 90% of them. */
    private void drain(String groupId, String topicName, String protocolName, long total) {
        protocol = protocolName;
        Properties props = settings(groupId, "drain");
        props.put("auto.offset.reset", "earliest");
        long count = 0;
        long countFrom = -1;
        double from = -1;
        double to = -1;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
            c.subscribe(List.of(topicName));
            double deadline = now() + 300_000;
            while (count < total * 9 / 10 && now() < deadline) {
                count += c.poll(pollTimeout).count();
                if (countFrom < 0 && count >= total / 10) {
                    from = now();
                    countFrom = count;
                }
            }
            to = now();
        } catch (RuntimeException e) {
            emit("{\"error\":" + quote("drain: " + e) + "}");
            return;
        }
        double rate = countFrom < 0 || to <= from ? 0 : (count - countFrom) / ((to - from) / 1000.0);
        emit("{\"drained\":" + String.format(Locale.ROOT, "%.1f", rate) + "}");
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println(
                "usage: RebalanceCost BOOTSTRAP SESSION_MS HEARTBEAT_MS MAX_POLL_MS POLL_MS");
            System.exit(2);
        }
        RebalanceCost driver = new RebalanceCost(args);
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            String line;
            while ((line = in.readLine()) != null) {
                String[] words = line.trim().split("\\s+");
                switch (words[0]) {
                    case "start":
                        driver.start(words[1], words[2], words[3], Integer.parseInt(words[4]));
                        break;
                    case "join":
                        emit("{\"t0\":" + ms(now()) + "}");
                        driver.addMember();
                        break;
                    case "leave":
                        driver.leave(Integer.parseInt(words[1]));
                        break;
                    case "status":
                        driver.status();
                        break;
                    case "dump":
                        driver.dump(Double.parseDouble(words[1]));
                        break;
                    case "stop":
                        driver.stopAll();
                        emit("{\"stopped\":true}");
                        break;
                    case "drain":
                        driver.drain(words[1], words[2], words[3], Long.parseLong(words[4]));
                        break;
                    case "quit":
                        return;
                    default:
                        emit("{\"error\":" + quote("unknown command " + line) + "}");
                }
            }
        } finally {
            // Also on EOF (the script died): leave the group rather than linger.
            driver.stopAll();
        }
    }
}

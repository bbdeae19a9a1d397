/*
 * Driver for benchmarks/join_latency.py: runs the Java consumers of one group in
 * one JVM (a thread per KafkaConsumer), so that 51 members cost one JVM, not 51.
 *
 * Usage: java JoinLatency BOOTSTRAP TOPIC SESSION_MS HEARTBEAT_MS MAX_POLL_MS POLL_MS
 *
 * Commands on stdin, one per line:
 *   start GROUP N   start N consumers in GROUP; answers "started"
 *   join            answers "t0 NANOS", then starts one more consumer in the group
 *   stop            closes every consumer of the group; answers "stopped"
 *   quit            stops and exits
 * Events on stdout, one per line:
 *   assigned INDEX GENERATION NANOS   consumer INDEX got the assignment of GENERATION
 *   error INDEX MESSAGE               consumer INDEX failed
 * NANOS are System.nanoTime() readings: the script only subtracts them from each other.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JoinLatency {

    private static final Object OUT = new Object();

    private final String bootstrap;
    private final String topic;
    private final String sessionMs;
    private final String heartbeatMs;
    private final String maxPollMs;
    private final Duration pollTimeout;
    private final List<Member> members = new ArrayList<>();
    private String group;

    private JoinLatency(String[] args) {
        bootstrap = args[0];
        topic = args[1];
        sessionMs = args[2];
        heartbeatMs = args[3];
        maxPollMs = args[4];
        pollTimeout = Duration.ofMillis(Long.parseLong(args[5]));
    }

    static void emit(String line) {
        // Consumer threads print concurrently; one line must never interleave with another.
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    /** One consumer and the thread that polls it (a KafkaConsumer is not thread-safe). */
    private final class Member implements Runnable, ConsumerRebalanceListener {
        private final int index;
        private final Thread thread;
        private volatile boolean stopping;
        private volatile KafkaConsumer<byte[], byte[]> consumer;

        Member(int index) {
            this.index = index;
            this.thread = new Thread(this, "member-" + index);
        }

        @Override
        public void run() {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("group.id", group);
            props.put("client.id", "join-latency-" + index);
            // The classic rebalance protocol and the range assignor, as the Python members use.
            props.put("group.protocol", "classic");
            props.put("partition.assignment.strategy",
                      "org.apache.kafka.clients.consumer.RangeAssignor");
            props.put("session.timeout.ms", sessionMs);
            props.put("heartbeat.interval.ms", heartbeatMs);
            props.put("max.poll.interval.ms", maxPollMs);
            // Membership only: no offset commits on the rebalance path.
            props.put("enable.auto.commit", "false");
            props.put("key.deserializer", ByteArrayDeserializer.class.getName());
            props.put("value.deserializer", ByteArrayDeserializer.class.getName());
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                consumer = c;
                c.subscribe(List.of(topic), this);
                while (!stopping) {
                    try {
                        c.poll(pollTimeout);
                    } catch (WakeupException e) {
                        // stop() woke us up; the loop condition decides.
                    }
                }
            } catch (RuntimeException e) {
                if (!stopping) {
                    emit("error " + index + " " + e.toString().replace('\n', ' '));
                }
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            long now = System.nanoTime();
            // Runs on the polling thread, after the coordinator took the new generation.
            int generation = consumer.groupMetadata().generationId();
            emit("assigned " + index + " " + generation + " " + now);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        }

        void stop() {
            stopping = true;
            KafkaConsumer<byte[], byte[]> c = consumer;
            if (c != null) {
                c.wakeup();
            }
        }
    }

    private void start(String groupId, int count) {
        group = groupId;
        for (int i = 0; i < count; i++) {
            addMember();
        }
        emit("started");
    }

    private void addMember() {
        Member member = new Member(members.size());
        members.add(member);
        member.thread.start();
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

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println(
                "usage: JoinLatency BOOTSTRAP TOPIC SESSION_MS HEARTBEAT_MS MAX_POLL_MS POLL_MS");
            System.exit(2);
        }
        JoinLatency driver = new JoinLatency(args);
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            String line;
            while ((line = in.readLine()) != null) {
                String[] words = line.trim().split("\\s+");
                switch (words[0]) {
                    case "start":
                        driver.start(words[1], Integer.parseInt(words[2]));
                        break;
                    case "join":
                        emit("t0 " + System.nanoTime());
                        driver.addMember();
                        break;
                    case "stop":
                        driver.stopAll();
                        emit("stopped");
                        break;
                    case "quit":
                        return;
                    default:
                        emit("error -1 unknown command " + line);
                }
            }
        } finally {
            // Also on EOF (the script died): leave the group rather than linger.
            driver.stopAll();
        }
    }
}

/*
 * Driver for benchmarks/assignors.py: times Kafka's Java sticky assignors on the inputs of
 * AbstractStickyAssignorTest.testLargeAssignmentAndGroupWith{Uniform,NonEqual}Subscription.
 *
 * Usage: java AssignorBench ASSIGNOR SCENARIO TOPICS PARTITIONS MEMBERS REPEATS
 *   ASSIGNOR  cooperative-sticky | sticky
 *   SCENARIO  uniform (every member subscribes to every topic)
 *             | nonequal (the last member subscribes to the first topic only)
 *
 * Each run uses a new assignor: a fresh assignment, then a reassignment where every member
 * but the first claims what it got (generation 1), as Kafka's test does. Output, one line per
 * run and one at the end:
 *   run INDEX FRESH_MS REASSIGN_MS MIN_COUNT MAX_COUNT
 *   memory PEAK_HEAP_BYTES PEAK_RSS_KB
 */

import java.lang.management.ManagementFactory;
import java.lang.management.MemoryPoolMXBean;
import java.lang.management.MemoryType;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor;
import org.apache.kafka.common.TopicPartition;

public final class AssignorBench {

    private AssignorBench() {
    }

    // Kafka's test pads names to the width of the count: t000 .. t499, c0000 .. c1999.
    static String name(String prefix, int i, int max) {
        int width = Integer.toString(max).length();
        return prefix + String.format("%0" + width + "d", i);
    }

    static AbstractStickyAssignor create(String assignor) {
        if (assignor.equals("cooperative-sticky"))
            return new CooperativeStickyAssignor();
        if (assignor.equals("sticky"))
            return new StickyAssignor();
        throw new IllegalArgumentException("unknown assignor " + assignor);
    }

    // What a member that got `partitions` in generation 1 sends, as Kafka's tests build it.
    static Subscription claim(String assignor, List<String> topics, List<TopicPartition> partitions) {
        if (assignor.equals("sticky")) {
            StickyAssignor member = new StickyAssignor();
            member.onAssignment(new Assignment(partitions), new ConsumerGroupMetadata("g", 1, "m", Optional.empty()));
            ByteBuffer userData = member.subscriptionUserData(new HashSet<>(topics));
            return new Subscription(topics, userData, Collections.emptyList(), -1, Optional.empty());
        }
        ByteBuffer userData = new CooperativeStickyAssignor().subscriptionUserData(new HashSet<>(topics));
        return new Subscription(topics, userData, partitions, 1, Optional.empty());
    }

    static long peakHeapBytes() {
        long total = 0;
        for (MemoryPoolMXBean pool : ManagementFactory.getMemoryPoolMXBeans()) {
            if (pool.getType() == MemoryType.HEAP)
                total += pool.getPeakUsage().getUsed();
        }
        return total;
    }

    static long peakRssKb() {
        try {
            for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
                if (line.startsWith("VmHWM:"))
                    return Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        } catch (Exception e) {
            // Not Linux: no figure.
        }
        return -1;
    }

    public static void main(String[] args) {
        String assignorName = args[0];
        boolean nonEqual = args[1].equals("nonequal");
        int topicCount = Integer.parseInt(args[2]);
        int partitionCount = Integer.parseInt(args[3]);
        int memberCount = Integer.parseInt(args[4]);
        int repeats = Integer.parseInt(args[5]);

        List<String> topics = new ArrayList<>();
        Map<String, Integer> partitionsPerTopic = new HashMap<>();
        for (int i = 0; i < topicCount; i++) {
            String topic = name("t", i, topicCount);
            topics.add(topic);
            partitionsPerTopic.put(topic, partitionCount);
        }
        List<String> members = new ArrayList<>();
        for (int i = 0; i < memberCount; i++)
            members.add(name("c", i, memberCount));

        for (int run = 0; run < repeats; run++) {
            Map<String, Subscription> subscriptions = new HashMap<>();
            for (int i = 0; i < memberCount; i++) {
                List<String> mine = nonEqual && i == memberCount - 1 ? topics.subList(0, 1) : topics;
                subscriptions.put(members.get(i), new Subscription(mine, null, Collections.emptyList(), -1, Optional.empty()));
            }
            AbstractStickyAssignor assignor = create(assignorName);
            long start = System.nanoTime();
            Map<String, List<TopicPartition>> first = assignor.assign(partitionsPerTopic, subscriptions);
            long freshNanos = System.nanoTime() - start;

            for (int i = 1; i < memberCount; i++) {
                String member = members.get(i);
                List<String> mine = nonEqual && i == memberCount - 1 ? topics.subList(0, 1) : topics;
                subscriptions.put(member, claim(assignorName, mine, first.get(member)));
            }
            start = System.nanoTime();
            Map<String, List<TopicPartition>> second = assignor.assign(partitionsPerTopic, subscriptions);
            long reassignNanos = System.nanoTime() - start;

            int min = Integer.MAX_VALUE;
            int max = 0;
            for (Collection<TopicPartition> partitions : second.values()) {
                min = Math.min(min, partitions.size());
                max = Math.max(max, partitions.size());
            }
            System.out.printf("run %d %.1f %.1f %d %d%n", run, freshNanos / 1e6, reassignNanos / 1e6, min, max);
            System.out.flush();
        }
        System.out.printf("memory %d %d%n", peakHeapBytes(), peakRssKb());
    }
}

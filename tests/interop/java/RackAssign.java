// Runs Kafka's own RangeAssignor on cases read from stdin and prints its assignments, for
// tests/interop/test_rack_aware_java.py to compare with ours.
//
// A case, line by line, then END:
//   T <topic> <racks of partition 0>;<racks of partition 1>;...   (racks comma-separated, - for none)
//   M <member id> <rack or -> <group instance id or -> <topic>,<topic>,...
// Printed for each case: "<member id> <topic>-<partition>,..." per member, then DONE.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

public class RackAssign {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        Map<String, List<PartitionInfo>> topics = new HashMap<>();
        Map<String, Subscription> members = new HashMap<>();
        Map<String, Node> nodes = new HashMap<>();
        Node noRack = new Node(0, "localhost", 9092, null);
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[0].equals("T")) {
                String[] parts = w.length > 2 ? w[2].split(";", -1) : new String[0];
                List<PartitionInfo> infos = new ArrayList<>();
                for (int p = 0; p < parts.length; p++) {
                    List<Node> replicas = new ArrayList<>();
                    if (parts[p].equals("-") || parts[p].isEmpty()) {
                        replicas.add(noRack);
                    } else {
                        for (String rack : parts[p].split(",")) {
                            replicas.add(nodes.computeIfAbsent(rack,
                                r -> new Node(nodes.size() + 1, "localhost", 9092, r)));
                        }
                    }
                    Node[] array = replicas.toArray(new Node[0]);
                    infos.add(new PartitionInfo(w[1], p, array[0], array, array));
                }
                topics.put(w[1], infos);
            } else if (w[0].equals("M")) {
                Optional<String> rack = w[2].equals("-") ? Optional.empty() : Optional.of(w[2]);
                Subscription s = new Subscription(Arrays.asList(w[4].split(",")), null,
                    Collections.emptyList(), -1, rack);
                if (!w[3].equals("-"))
                    s.setGroupInstanceId(Optional.of(w[3]));
                members.put(w[1], s);
            } else if (w[0].equals("END")) {
                Map<String, List<TopicPartition>> out = new RangeAssignor().assignPartitions(topics, members);
                for (Map.Entry<String, List<TopicPartition>> e : new TreeMap<>(out).entrySet()) {
                    StringBuilder b = new StringBuilder(e.getKey()).append(' ');
                    for (TopicPartition tp : e.getValue())
                        b.append(tp.topic()).append('-').append(tp.partition()).append(',');
                    System.out.println(b);
                }
                System.out.println("DONE");
                System.out.flush();
                topics = new HashMap<>();
                members = new HashMap<>();
            }
        }
    }
}

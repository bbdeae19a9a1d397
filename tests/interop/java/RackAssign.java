// Runs Kafka's own assignors (range, sticky, cooperative-sticky) on cases read from stdin and
// prints their assignments, for tests/interop/test_rack_aware_java.py to compare with ours.
//
// A case, line by line, then END:
//   A <assignor name>                                               (default: range)
//   T <topic> <racks of partition 0>;<racks of partition 1>;...   (racks comma-separated, - for none)
//   M <member id> <rack or -> <group instance id or -> <topic>,<topic>,...
//     [<owned topic-partition>,... or -> <generation> <user data in hex or ->]
// Printed for each case: "<member id> <topic>-<partition>,..." per member, then DONE.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractPartitionAssignor;
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
        String assignor = "range";
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[0].equals("A")) {
                assignor = w[1];
            } else if (w[0].equals("T")) {
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
                List<TopicPartition> owned = new ArrayList<>();
                int generation = -1;
                ByteBuffer userData = null;
                if (w.length > 5) {
                    if (!w[5].equals("-")) {
                        for (String tp : w[5].split(",")) {
                            int dash = tp.lastIndexOf('-');
                            owned.add(new TopicPartition(tp.substring(0, dash),
                                Integer.parseInt(tp.substring(dash + 1))));
                        }
                    }
                    generation = Integer.parseInt(w[6]);
                    if (!w[7].equals("-"))
                        userData = ByteBuffer.wrap(HexFormat.of().parseHex(w[7]));
                }
                Subscription s = new Subscription(Arrays.asList(w[4].split(",")), userData,
                    owned, generation, rack);
                if (!w[3].equals("-"))
                    s.setGroupInstanceId(Optional.of(w[3]));
                members.put(w[1], s);
            } else if (w[0].equals("END")) {
                AbstractPartitionAssignor a = assignor.equals("sticky") ? new StickyAssignor()
                    : assignor.equals("cooperative-sticky") ? new CooperativeStickyAssignor()
                    : new RangeAssignor();
                Map<String, List<TopicPartition>> out = a.assignPartitions(topics, members);
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
                assignor = "range";
            }
        }
    }
}

// Kafka's own encoding of ConsumerGroupHeartbeat and ConsumerGroupDescribe (kafka-clients'
// generated message classes), for tests/interop/test_consumer_group_golden.py.
//
// Prints "<case> <hex>" for each case below, serialized with ObjectSerializationCache and
// ByteBufferAccessor; then reads "<case> <hex>" lines (another encoder's bytes) from stdin
// and answers "<case> equal" when kafka-clients reads them back as the same message, all
// bytes used, or "<case> differs <what it read>". The cases must match the Python test's.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.ConsumerGroupDescribeRequestData;
import org.apache.kafka.common.message.ConsumerGroupDescribeResponseData;
import org.apache.kafka.common.message.ConsumerGroupHeartbeatRequestData;
import org.apache.kafka.common.message.ConsumerGroupHeartbeatResponseData;
import org.apache.kafka.common.message.RequestHeaderData;
import org.apache.kafka.common.message.ResponseHeaderData;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;

public class ConsumerGroupWire {
    static final Uuid ORDERS = new Uuid(0x0123456789abcdefL, 0x0fedcba987654321L);
    static final Uuid PAYMENTS = new Uuid(0x1111111111111111L, 0x2222222222222222L);

    interface Reader {
        Message read(ByteBufferAccessor accessor, short version);
    }

    static final class Case {
        final Message message;
        final short version;
        final Reader reader;

        Case(Message message, int version, Reader reader) {
            this.message = message;
            this.version = (short) version;
            this.reader = reader;
        }
    }

    static ConsumerGroupHeartbeatRequestData.TopicPartitions owned(Uuid id, Integer... partitions) {
        return new ConsumerGroupHeartbeatRequestData.TopicPartitions()
            .setTopicId(id).setPartitions(Arrays.asList(partitions));
    }

    static ConsumerGroupHeartbeatResponseData.TopicPartitions assigned(Uuid id, Integer... partitions) {
        return new ConsumerGroupHeartbeatResponseData.TopicPartitions()
            .setTopicId(id).setPartitions(Arrays.asList(partitions));
    }

    static ConsumerGroupDescribeResponseData.Assignment described(Object... topics) {
        List<ConsumerGroupDescribeResponseData.TopicPartitions> list = new ArrayList<>();
        for (int i = 0; i < topics.length; i += 3) {
            list.add(new ConsumerGroupDescribeResponseData.TopicPartitions()
                .setTopicId((Uuid) topics[i])
                .setTopicName((String) topics[i + 1])
                .setPartitions(Arrays.asList((Integer[]) topics[i + 2])));
        }
        return new ConsumerGroupDescribeResponseData.Assignment().setTopicPartitions(list);
    }

    static Map<String, Case> cases() {
        Map<String, Case> cases = new LinkedHashMap<>();
        Reader hbRequest = ConsumerGroupHeartbeatRequestData::new;
        Reader hbResponse = ConsumerGroupHeartbeatResponseData::new;
        Reader dRequest = ConsumerGroupDescribeRequestData::new;
        Reader dResponse = ConsumerGroupDescribeResponseData::new;

        for (int v = 0; v <= 1; v++) {
            ConsumerGroupHeartbeatRequestData join = new ConsumerGroupHeartbeatRequestData()
                .setGroupId("orders-app").setMemberId("m-1").setMemberEpoch(0)
                .setInstanceId("worker-1").setRackId("rack-a").setRebalanceTimeoutMs(300000)
                .setSubscribedTopicNames(Arrays.asList("orders", "payments"))
                .setServerAssignor("uniform")
                .setTopicPartitions(Collections.emptyList());
            if (v >= 1) {
                join.setSubscribedTopicRegex("orders-.*");
            }
            cases.put("heartbeat-request-join-v" + v, new Case(join, v, hbRequest));
            // Everything unchanged: every nullable field null, the timeout -1.
            cases.put("heartbeat-request-unchanged-v" + v, new Case(
                new ConsumerGroupHeartbeatRequestData()
                    .setGroupId("orders-app").setMemberId("m-1").setMemberEpoch(7),
                v, hbRequest));
            cases.put("heartbeat-request-owned-v" + v, new Case(
                new ConsumerGroupHeartbeatRequestData()
                    .setGroupId("g").setMemberId("").setMemberEpoch(12)
                    .setSubscribedTopicNames(Collections.emptyList())
                    .setTopicPartitions(Arrays.asList(
                        owned(ORDERS, 0, 3, 2147483647), owned(PAYMENTS))),
                v, hbRequest));
            cases.put("heartbeat-request-leave-v" + v, new Case(
                new ConsumerGroupHeartbeatRequestData()
                    .setGroupId("g").setMemberId("m-\u00fc").setMemberEpoch(-2)
                    .setInstanceId("static-1"),
                v, hbRequest));

            cases.put("heartbeat-response-no-assignment-v" + v, new Case(
                new ConsumerGroupHeartbeatResponseData()
                    .setMemberId("m-1").setMemberEpoch(3).setHeartbeatIntervalMs(5000),
                v, hbResponse));
            cases.put("heartbeat-response-empty-assignment-v" + v, new Case(
                new ConsumerGroupHeartbeatResponseData()
                    .setThrottleTimeMs(10).setMemberId("m-1").setMemberEpoch(1)
                    .setHeartbeatIntervalMs(5000)
                    .setAssignment(new ConsumerGroupHeartbeatResponseData.Assignment()),
                v, hbResponse));
            cases.put("heartbeat-response-assignment-v" + v, new Case(
                new ConsumerGroupHeartbeatResponseData()
                    .setMemberId("m-1").setMemberEpoch(2).setHeartbeatIntervalMs(5000)
                    .setAssignment(new ConsumerGroupHeartbeatResponseData.Assignment()
                        .setTopicPartitions(Arrays.asList(
                            assigned(ORDERS, 1, 0), assigned(PAYMENTS, 4)))),
                v, hbResponse));
            cases.put("heartbeat-response-error-v" + v, new Case(
                new ConsumerGroupHeartbeatResponseData()
                    .setErrorCode((short) 110).setErrorMessage("fenced")
                    .setMemberEpoch(-1),
                v, hbResponse));

            cases.put("describe-request-v" + v, new Case(
                new ConsumerGroupDescribeRequestData()
                    .setGroupIds(Arrays.asList("orders-app", "other"))
                    .setIncludeAuthorizedOperations(v == 1),
                v, dRequest));
            cases.put("describe-request-none-v" + v, new Case(
                new ConsumerGroupDescribeRequestData(), v, dRequest));

            ConsumerGroupDescribeResponseData.Member member =
                new ConsumerGroupDescribeResponseData.Member()
                    .setMemberId("m-1").setInstanceId(null).setRackId("rack-a").setMemberEpoch(4)
                    .setClientId("client").setClientHost("/127.0.0.1")
                    .setSubscribedTopicNames(Arrays.asList("orders", "payments"))
                    .setSubscribedTopicRegex(null)
                    .setAssignment(described(ORDERS, "orders", new Integer[] {0, 1}))
                    .setTargetAssignment(described(
                        ORDERS, "orders", new Integer[] {0}, PAYMENTS, "payments", new Integer[] {}));
            ConsumerGroupDescribeResponseData.Member other =
                new ConsumerGroupDescribeResponseData.Member()
                    .setMemberId("m-2").setInstanceId("static-2").setMemberEpoch(4)
                    .setClientId("c").setClientHost("h").setSubscribedTopicRegex("orders.*")
                    .setAssignment(described()).setTargetAssignment(described());
            if (v >= 1) {
                member.setMemberType((byte) 1);
                other.setMemberType((byte) 0);
            }
            cases.put("describe-response-v" + v, new Case(
                new ConsumerGroupDescribeResponseData()
                    .setThrottleTimeMs(0)
                    .setGroups(Arrays.asList(
                        new ConsumerGroupDescribeResponseData.DescribedGroup()
                            .setGroupId("orders-app").setGroupState("Stable")
                            .setGroupEpoch(5).setAssignmentEpoch(5).setAssignorName("uniform")
                            .setMembers(Arrays.asList(member, other))
                            .setAuthorizedOperations(0x0f00),
                        new ConsumerGroupDescribeResponseData.DescribedGroup()
                            .setErrorCode((short) 69).setErrorMessage("Group other not found.")
                            .setGroupId("other").setGroupState("Dead")
                            .setGroupEpoch(-1).setAssignmentEpoch(-1))),
                v, dResponse));
        }

        cases.put("request-header-v2", new Case(
            new RequestHeaderData().setRequestApiKey((short) 68).setRequestApiVersion((short) 1)
                .setCorrelationId(12345).setClientId("coordination-1"),
            2, RequestHeaderData::new));
        cases.put("request-header-null-client-v2", new Case(
            new RequestHeaderData().setRequestApiKey((short) 69).setRequestApiVersion((short) 0)
                .setCorrelationId(-7).setClientId(null),
            2, RequestHeaderData::new));
        cases.put("response-header-v1", new Case(
            new ResponseHeaderData().setCorrelationId(12345), 1, ResponseHeaderData::new));
        return cases;
    }

    static String hex(ByteBuffer buffer) {
        StringBuilder out = new StringBuilder();
        while (buffer.hasRemaining()) {
            out.append(String.format("%02x", buffer.get() & 0xff));
        }
        return out.toString();
    }

    static byte[] unhex(String text) {
        byte[] out = new byte[text.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        Map<String, Case> cases = cases();
        for (Map.Entry<String, Case> entry : cases.entrySet()) {
            Case c = entry.getValue();
            ObjectSerializationCache cache = new ObjectSerializationCache();
            ByteBuffer buffer = ByteBuffer.allocate(c.message.size(cache, c.version));
            c.message.write(new ByteBufferAccessor(buffer), cache, c.version);
            buffer.flip();
            System.out.println(entry.getKey() + " " + hex(buffer));
        }
        System.out.println("END");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null && !line.isEmpty()) {
            String[] parts = line.split(" ", 2);
            Case c = cases.get(parts[0]);
            if (c == null) {
                System.out.println(parts[0] + " unknown");
                continue;
            }
            ByteBuffer buffer = ByteBuffer.wrap(unhex(parts.length > 1 ? parts[1] : ""));
            String verdict;
            try {
                Message read = c.reader.read(new ByteBufferAccessor(buffer), c.version);
                if (buffer.hasRemaining()) {
                    verdict = "differs " + buffer.remaining() + " bytes left after " + read;
                } else if (read.equals(c.message)) {
                    verdict = "equal";
                } else {
                    verdict = "differs " + read;
                }
            } catch (RuntimeException e) {
                verdict = "differs " + e;
            }
            System.out.println(parts[0] + " " + verdict);
        }
        System.out.println("END");
        System.out.flush();
    }
}

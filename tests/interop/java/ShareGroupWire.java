// Kafka's own encoding of the share-group APIs (KIP-932): ShareGroupHeartbeat,
// ShareGroupDescribe, ShareFetch and ShareAcknowledge, and the admin's
// DescribeShareGroupOffsets and AlterShareGroupOffsets (kafka-clients' generated message
// classes), for tests/interop/test_share_group_golden.py.
//
// Prints "<case> <hex>" for each case below, serialized with ObjectSerializationCache and
// ByteBufferAccessor; then reads "<case> <hex>" lines (another encoder's bytes) from stdin
// and answers "<case> equal" when kafka-clients reads them back as the same message, all
// bytes used, or "<case> differs <what it read>". The cases must match the Python test's.
// The records of the ShareFetch responses are built here with Kafka's MemoryRecords, so the
// Python test also reads a record batch Java wrote.
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
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.message.AlterShareGroupOffsetsRequestData;
import org.apache.kafka.common.message.AlterShareGroupOffsetsResponseData;
import org.apache.kafka.common.message.DescribeShareGroupOffsetsRequestData;
import org.apache.kafka.common.message.DescribeShareGroupOffsetsResponseData;
import org.apache.kafka.common.message.RequestHeaderData;
import org.apache.kafka.common.message.ResponseHeaderData;
import org.apache.kafka.common.message.ShareAcknowledgeRequestData;
import org.apache.kafka.common.message.ShareAcknowledgeResponseData;
import org.apache.kafka.common.message.ShareFetchRequestData;
import org.apache.kafka.common.message.ShareFetchResponseData;
import org.apache.kafka.common.message.ShareGroupDescribeRequestData;
import org.apache.kafka.common.message.ShareGroupDescribeResponseData;
import org.apache.kafka.common.message.ShareGroupHeartbeatRequestData;
import org.apache.kafka.common.message.ShareGroupHeartbeatResponseData;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.SimpleRecord;

public class ShareGroupWire {
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

    static byte[] utf8(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    // Three records from offset 10: key, value and headers; no key; no value.
    static MemoryRecords records() {
        return MemoryRecords.withRecords(10L, Compression.NONE,
            new SimpleRecord(1700000000000L, utf8("k-1"), utf8("v-1"),
                new Header[] {new RecordHeader("trace", utf8("abc")), new RecordHeader("empty", null)}),
            new SimpleRecord(1700000000001L, null, utf8("v-2")),
            new SimpleRecord(1700000000002L, utf8("k-3"), null));
    }

    static List<Byte> types(int... values) {
        List<Byte> out = new ArrayList<>();
        for (int value : values) {
            out.add((byte) value);
        }
        return out;
    }

    static ShareGroupHeartbeatResponseData.TopicPartitions assigned(Uuid id, Integer... partitions) {
        return new ShareGroupHeartbeatResponseData.TopicPartitions()
            .setTopicId(id).setPartitions(Arrays.asList(partitions));
    }

    static ShareFetchRequestData.AcknowledgementBatch fetchAck(long first, long last, int... kinds) {
        return new ShareFetchRequestData.AcknowledgementBatch()
            .setFirstOffset(first).setLastOffset(last).setAcknowledgeTypes(types(kinds));
    }

    static ShareAcknowledgeRequestData.AcknowledgementBatch ack(long first, long last, int... kinds) {
        return new ShareAcknowledgeRequestData.AcknowledgementBatch()
            .setFirstOffset(first).setLastOffset(last).setAcknowledgeTypes(types(kinds));
    }

    static ShareFetchRequestData.FetchTopic fetchTopic(
            Uuid id, ShareFetchRequestData.FetchPartition... partitions) {
        ShareFetchRequestData.FetchPartitionCollection collection =
            new ShareFetchRequestData.FetchPartitionCollection();
        for (ShareFetchRequestData.FetchPartition partition : partitions) {
            collection.add(partition);
        }
        return new ShareFetchRequestData.FetchTopic().setTopicId(id).setPartitions(collection);
    }

    static ShareFetchRequestData.FetchPartition fetchPartition(
            int index, ShareFetchRequestData.AcknowledgementBatch... batches) {
        return new ShareFetchRequestData.FetchPartition()
            .setPartitionIndex(index).setAcknowledgementBatches(Arrays.asList(batches));
    }

    static ShareFetchRequestData.FetchTopicCollection fetchTopics(
            ShareFetchRequestData.FetchTopic... topics) {
        ShareFetchRequestData.FetchTopicCollection collection =
            new ShareFetchRequestData.FetchTopicCollection();
        for (ShareFetchRequestData.FetchTopic topic : topics) {
            collection.add(topic);
        }
        return collection;
    }

    static ShareAcknowledgeRequestData.AcknowledgeTopic ackTopic(
            Uuid id, ShareAcknowledgeRequestData.AcknowledgePartition... partitions) {
        ShareAcknowledgeRequestData.AcknowledgePartitionCollection collection =
            new ShareAcknowledgeRequestData.AcknowledgePartitionCollection();
        for (ShareAcknowledgeRequestData.AcknowledgePartition partition : partitions) {
            collection.add(partition);
        }
        return new ShareAcknowledgeRequestData.AcknowledgeTopic().setTopicId(id).setPartitions(collection);
    }

    static ShareAcknowledgeRequestData.AcknowledgePartition ackPartition(
            int index, ShareAcknowledgeRequestData.AcknowledgementBatch... batches) {
        return new ShareAcknowledgeRequestData.AcknowledgePartition()
            .setPartitionIndex(index).setAcknowledgementBatches(Arrays.asList(batches));
    }

    static ShareFetchResponseData.NodeEndpointCollection fetchNodes() {
        ShareFetchResponseData.NodeEndpointCollection nodes =
            new ShareFetchResponseData.NodeEndpointCollection();
        nodes.add(new ShareFetchResponseData.NodeEndpoint()
            .setNodeId(2).setHost("broker-2").setPort(9092).setRack("rack-b"));
        nodes.add(new ShareFetchResponseData.NodeEndpoint()
            .setNodeId(3).setHost("h").setPort(1).setRack(null));
        return nodes;
    }

    static ShareAcknowledgeResponseData.NodeEndpointCollection ackNodes() {
        ShareAcknowledgeResponseData.NodeEndpointCollection nodes =
            new ShareAcknowledgeResponseData.NodeEndpointCollection();
        nodes.add(new ShareAcknowledgeResponseData.NodeEndpoint()
            .setNodeId(2).setHost("broker-2").setPort(9092).setRack("rack-b"));
        return nodes;
    }

    static Map<String, Case> cases() {
        Map<String, Case> cases = new LinkedHashMap<>();
        Reader hbRequest = ShareGroupHeartbeatRequestData::new;
        Reader hbResponse = ShareGroupHeartbeatResponseData::new;
        Reader dRequest = ShareGroupDescribeRequestData::new;
        Reader dResponse = ShareGroupDescribeResponseData::new;
        Reader fRequest = ShareFetchRequestData::new;
        Reader fResponse = ShareFetchResponseData::new;
        Reader aRequest = ShareAcknowledgeRequestData::new;
        Reader aResponse = ShareAcknowledgeResponseData::new;

        // -- ShareGroupHeartbeat and ShareGroupDescribe: v1 only --
        cases.put("heartbeat-request-join-v1", new Case(
            new ShareGroupHeartbeatRequestData()
                .setGroupId("orders-app").setMemberId("m-1").setMemberEpoch(0)
                .setRackId("rack-a").setSubscribedTopicNames(Arrays.asList("orders", "payments")),
            1, hbRequest));
        cases.put("heartbeat-request-unchanged-v1", new Case(
            new ShareGroupHeartbeatRequestData()
                .setGroupId("orders-app").setMemberId("m-1").setMemberEpoch(7),
            1, hbRequest));
        cases.put("heartbeat-request-leave-v1", new Case(
            new ShareGroupHeartbeatRequestData()
                .setGroupId("g").setMemberId("m-\u00fc").setMemberEpoch(-1)
                .setSubscribedTopicNames(Collections.emptyList()),
            1, hbRequest));
        cases.put("heartbeat-response-no-assignment-v1", new Case(
            new ShareGroupHeartbeatResponseData()
                .setMemberId("m-1").setMemberEpoch(3).setHeartbeatIntervalMs(5000),
            1, hbResponse));
        cases.put("heartbeat-response-empty-assignment-v1", new Case(
            new ShareGroupHeartbeatResponseData()
                .setThrottleTimeMs(10).setMemberId("m-1").setMemberEpoch(1)
                .setHeartbeatIntervalMs(5000)
                .setAssignment(new ShareGroupHeartbeatResponseData.Assignment()),
            1, hbResponse));
        cases.put("heartbeat-response-assignment-v1", new Case(
            new ShareGroupHeartbeatResponseData()
                .setMemberId("m-1").setMemberEpoch(2).setHeartbeatIntervalMs(5000)
                .setAssignment(new ShareGroupHeartbeatResponseData.Assignment()
                    .setTopicPartitions(Arrays.asList(
                        assigned(ORDERS, 1, 0), assigned(PAYMENTS, 4)))),
            1, hbResponse));
        cases.put("heartbeat-response-error-v1", new Case(
            new ShareGroupHeartbeatResponseData()
                .setErrorCode((short) 25).setErrorMessage("unknown member")
                .setMemberEpoch(-1),
            1, hbResponse));
        cases.put("describe-request-v1", new Case(
            new ShareGroupDescribeRequestData()
                .setGroupIds(Arrays.asList("orders-app", "other"))
                .setIncludeAuthorizedOperations(true),
            1, dRequest));
        cases.put("describe-request-none-v1", new Case(new ShareGroupDescribeRequestData(), 1, dRequest));
        cases.put("describe-response-v1", new Case(
            new ShareGroupDescribeResponseData()
                .setThrottleTimeMs(0)
                .setGroups(Arrays.asList(
                    new ShareGroupDescribeResponseData.DescribedGroup()
                        .setGroupId("orders-app").setGroupState("Stable")
                        .setGroupEpoch(5).setAssignmentEpoch(5).setAssignorName("simple")
                        .setMembers(Arrays.asList(
                            new ShareGroupDescribeResponseData.Member()
                                .setMemberId("m-1").setRackId("rack-a").setMemberEpoch(4)
                                .setClientId("client").setClientHost("/127.0.0.1")
                                .setSubscribedTopicNames(Arrays.asList("orders", "payments"))
                                .setAssignment(new ShareGroupDescribeResponseData.Assignment()
                                    .setTopicPartitions(Arrays.asList(
                                        new ShareGroupDescribeResponseData.TopicPartitions()
                                            .setTopicId(ORDERS).setTopicName("orders")
                                            .setPartitions(Arrays.asList(0, 1)),
                                        new ShareGroupDescribeResponseData.TopicPartitions()
                                            .setTopicId(PAYMENTS).setTopicName("payments")
                                            .setPartitions(Collections.emptyList())))),
                            new ShareGroupDescribeResponseData.Member()
                                .setMemberId("m-2").setRackId(null).setMemberEpoch(4)
                                .setClientId("c").setClientHost("h")
                                .setAssignment(new ShareGroupDescribeResponseData.Assignment())))
                        .setAuthorizedOperations(0x0f00),
                    new ShareGroupDescribeResponseData.DescribedGroup()
                        .setErrorCode((short) 69).setErrorMessage("Group other not found.")
                        .setGroupId("other").setGroupState("Dead")
                        .setGroupEpoch(-1).setAssignmentEpoch(-1))),
            1, dResponse));

        // -- ShareFetch and ShareAcknowledge: v1 and v2 --
        for (int v = 1; v <= 2; v++) {
            ShareFetchRequestData open = new ShareFetchRequestData()
                .setGroupId("orders-app").setMemberId("m-1").setShareSessionEpoch(0)
                .setMaxWaitMs(500).setMinBytes(1).setMaxRecords(500).setBatchSize(500)
                .setTopics(fetchTopics(
                    fetchTopic(ORDERS, fetchPartition(0), fetchPartition(1)),
                    fetchTopic(PAYMENTS, fetchPartition(2))));
            if (v >= 2) {
                open.setShareAcquireMode((byte) 1);
            }
            cases.put("fetch-request-open-v" + v, new Case(open, v, fRequest));
            ShareFetchRequestData acks = new ShareFetchRequestData()
                .setGroupId("orders-app").setMemberId("m-1").setShareSessionEpoch(3)
                .setMaxWaitMs(0).setMinBytes(0).setMaxBytes(1048576).setMaxRecords(1).setBatchSize(1)
                .setTopics(fetchTopics(fetchTopic(ORDERS,
                    fetchPartition(0, fetchAck(10, 12, 1), fetchAck(13, 15, 1, 0, 2)))))
                .setForgottenTopicsData(Arrays.asList(new ShareFetchRequestData.ForgottenTopic()
                    .setTopicId(PAYMENTS).setPartitions(Arrays.asList(2))));
            if (v >= 2) {
                acks.setIsRenewAck(true).setTopics(fetchTopics(fetchTopic(ORDERS,
                    fetchPartition(0, fetchAck(10, 12, 4), fetchAck(13, 15, 1, 0, 2)))));
            }
            cases.put("fetch-request-acks-v" + v, new Case(acks, v, fRequest));
            cases.put("fetch-request-close-v" + v, new Case(
                new ShareFetchRequestData()
                    .setGroupId(null).setMemberId("m-\u00fc").setShareSessionEpoch(-1)
                    .setMaxWaitMs(0).setMinBytes(0).setMaxRecords(0).setBatchSize(0),
                v, fRequest));

            ShareFetchResponseData.ShareFetchableTopicResponseCollection responses =
                new ShareFetchResponseData.ShareFetchableTopicResponseCollection();
            responses.add(new ShareFetchResponseData.ShareFetchableTopicResponse()
                .setTopicId(ORDERS)
                .setPartitions(Arrays.asList(
                    new ShareFetchResponseData.PartitionData()
                        .setPartitionIndex(0)
                        .setCurrentLeader(new ShareFetchResponseData.LeaderIdAndEpoch()
                            .setLeaderId(1).setLeaderEpoch(0))
                        .setRecords(records())
                        .setAcquiredRecords(Arrays.asList(
                            new ShareFetchResponseData.AcquiredRecords()
                                .setFirstOffset(10).setLastOffset(11).setDeliveryCount((short) 1),
                            new ShareFetchResponseData.AcquiredRecords()
                                .setFirstOffset(12).setLastOffset(12).setDeliveryCount((short) 2))),
                    new ShareFetchResponseData.PartitionData()
                        .setPartitionIndex(1)
                        .setErrorCode((short) 6).setErrorMessage("not the leader")
                        .setAcknowledgeErrorCode((short) 121).setAcknowledgeErrorMessage("lock lost")
                        .setCurrentLeader(new ShareFetchResponseData.LeaderIdAndEpoch()
                            .setLeaderId(2).setLeaderEpoch(7))
                        .setRecords(MemoryRecords.EMPTY))));
            cases.put("fetch-response-v" + v, new Case(
                new ShareFetchResponseData()
                    .setThrottleTimeMs(0).setAcquisitionLockTimeoutMs(30000)
                    .setResponses(responses).setNodeEndpoints(fetchNodes()),
                v, fResponse));
            cases.put("fetch-response-error-v" + v, new Case(
                new ShareFetchResponseData()
                    .setThrottleTimeMs(5).setErrorCode((short) 122)
                    .setErrorMessage("no share session").setAcquisitionLockTimeoutMs(-1),
                v, fResponse));

            ShareAcknowledgeRequestData.AcknowledgeTopicCollection ackTopics =
                new ShareAcknowledgeRequestData.AcknowledgeTopicCollection();
            ackTopics.add(ackTopic(ORDERS,
                ackPartition(0, ack(10, 12, v >= 2 ? 4 : 1)),
                ackPartition(1, ack(20, 22, 2, 3, 0))));
            ackTopics.add(ackTopic(PAYMENTS, ackPartition(2)));
            cases.put("acknowledge-request-v" + v, new Case(
                new ShareAcknowledgeRequestData()
                    .setGroupId("orders-app").setMemberId("m-1").setShareSessionEpoch(2)
                    .setIsRenewAck(v >= 2).setTopics(ackTopics),
                v, aRequest));
            ShareAcknowledgeResponseData.ShareAcknowledgeTopicResponseCollection ackResponses =
                new ShareAcknowledgeResponseData.ShareAcknowledgeTopicResponseCollection();
            ackResponses.add(new ShareAcknowledgeResponseData.ShareAcknowledgeTopicResponse()
                .setTopicId(ORDERS)
                .setPartitions(Arrays.asList(
                    new ShareAcknowledgeResponseData.PartitionData()
                        .setPartitionIndex(0)
                        .setCurrentLeader(new ShareAcknowledgeResponseData.LeaderIdAndEpoch()
                            .setLeaderId(1).setLeaderEpoch(0)),
                    new ShareAcknowledgeResponseData.PartitionData()
                        .setPartitionIndex(1).setErrorCode((short) 121)
                        .setErrorMessage("lock lost")
                        .setCurrentLeader(new ShareAcknowledgeResponseData.LeaderIdAndEpoch()
                            .setLeaderId(-1).setLeaderEpoch(-1)))));
            ShareAcknowledgeResponseData acknowledged = new ShareAcknowledgeResponseData()
                .setThrottleTimeMs(0).setResponses(ackResponses).setNodeEndpoints(ackNodes());
            if (v >= 2) {
                acknowledged.setAcquisitionLockTimeoutMs(15000);
            }
            cases.put("acknowledge-response-v" + v, new Case(acknowledged, v, aResponse));
        }

        cases.put("request-header-v2", new Case(
            new RequestHeaderData().setRequestApiKey((short) 78).setRequestApiVersion((short) 2)
                .setCorrelationId(12345).setClientId("coordination-1"),
            2, RequestHeaderData::new));
        cases.put("response-header-v1", new Case(
            new ResponseHeaderData().setCorrelationId(12345), 1, ResponseHeaderData::new));
        adminCases(cases);
        return cases;
    }

    // The cases of tests/unit/test_share_group_offsets_codec.py (topic id 0...01).
    static void adminCases(Map<String, Case> cases) {
        Uuid topic = new Uuid(0L, 1L);
        Reader oRequest = DescribeShareGroupOffsetsRequestData::new;
        Reader oResponse = DescribeShareGroupOffsetsResponseData::new;
        Reader altRequest = AlterShareGroupOffsetsRequestData::new;
        Reader altResponse = AlterShareGroupOffsetsResponseData::new;
        cases.put("offsets-request-all-v1", new Case(
            new DescribeShareGroupOffsetsRequestData().setGroups(Arrays.asList(
                new DescribeShareGroupOffsetsRequestData.DescribeShareGroupOffsetsRequestGroup()
                    .setGroupId("g").setTopics(null))),
            1, oRequest));
        cases.put("offsets-request-topics-v1", new Case(
            new DescribeShareGroupOffsetsRequestData().setGroups(Arrays.asList(
                new DescribeShareGroupOffsetsRequestData.DescribeShareGroupOffsetsRequestGroup()
                    .setGroupId("g").setTopics(Arrays.asList(
                        new DescribeShareGroupOffsetsRequestData.DescribeShareGroupOffsetsRequestTopic()
                            .setTopicName("t").setPartitions(Arrays.asList(0, 3)))))),
            1, oRequest));
        cases.put("offsets-response-v1", new Case(
            new DescribeShareGroupOffsetsResponseData().setGroups(Arrays.asList(
                new DescribeShareGroupOffsetsResponseData.DescribeShareGroupOffsetsResponseGroup()
                    .setGroupId("g").setTopics(Arrays.asList(
                        new DescribeShareGroupOffsetsResponseData.DescribeShareGroupOffsetsResponseTopic()
                            .setTopicName("t").setTopicId(topic).setPartitions(Arrays.asList(
                                new DescribeShareGroupOffsetsResponseData.DescribeShareGroupOffsetsResponsePartition()
                                    .setPartitionIndex(0).setStartOffset(17).setLeaderEpoch(5)
                                    .setLag(2))))))),
            1, oResponse));
        cases.put("offsets-response-error-v1", new Case(
            new DescribeShareGroupOffsetsResponseData().setThrottleTimeMs(10).setGroups(Arrays.asList(
                new DescribeShareGroupOffsetsResponseData.DescribeShareGroupOffsetsResponseGroup()
                    .setGroupId("g").setErrorCode((short) 16).setErrorMessage("x"))),
            1, oResponse));
        AlterShareGroupOffsetsRequestData.AlterShareGroupOffsetsRequestTopicCollection toAlter =
            new AlterShareGroupOffsetsRequestData.AlterShareGroupOffsetsRequestTopicCollection();
        toAlter.add(new AlterShareGroupOffsetsRequestData.AlterShareGroupOffsetsRequestTopic()
            .setTopicName("t").setPartitions(Arrays.asList(
                new AlterShareGroupOffsetsRequestData.AlterShareGroupOffsetsRequestPartition()
                    .setPartitionIndex(0).setStartOffset(5))));
        cases.put("alter-request-v0", new Case(
            new AlterShareGroupOffsetsRequestData().setGroupId("g").setTopics(toAlter),
            0, altRequest));
        AlterShareGroupOffsetsResponseData.AlterShareGroupOffsetsResponseTopicCollection altered =
            new AlterShareGroupOffsetsResponseData.AlterShareGroupOffsetsResponseTopicCollection();
        altered.add(new AlterShareGroupOffsetsResponseData.AlterShareGroupOffsetsResponseTopic()
            .setTopicName("t").setTopicId(topic).setPartitions(Arrays.asList(
                new AlterShareGroupOffsetsResponseData.AlterShareGroupOffsetsResponsePartition()
                    .setPartitionIndex(0))));
        cases.put("alter-response-v0", new Case(
            new AlterShareGroupOffsetsResponseData().setResponses(altered), 0, altResponse));
        cases.put("alter-response-error-v0", new Case(
            new AlterShareGroupOffsetsResponseData().setErrorCode((short) 68)
                .setErrorMessage("members"),
            0, altResponse));
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

/*
 * The Java side of benchmarks/share_throughput.py: one Kafka KafkaShareConsumer
 * (share.acknowledgement.mode=explicit) in a share group, reporting JSON lines on stdout.
 *
 * Usage: java ShareBench --bootstrap HOST:PORT --group G --topic T --mode run|hold
 *            [--max-poll-records 500] [--poll-ms 100]
 *
 * run:  every record is acknowledged ACCEPT as it is handled; the next poll carries the
 *       acknowledgements (as the Python side does). After a poll that returned records, at
 *       most every 100 ms (at once when a redelivered record came, and after the last
 *       records before an empty poll):
 *       {"event":"progress","handled":N,"redelivered":R,"t":ms}
 * hold: polls until it gets records, reports {"event":"held","records":N,"t":ms}, and then
 *       holds them unacknowledged, polling no more, until it is killed or stopped.
 * Both start with {"event":"started","t":ms}. SIGTERM closes the consumer (what it holds is
 * released) and prints {"event":"closed","t":ms}.
 */

import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class ShareBench {

    static double now() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1000.0 + t.getNano() / 1_000_000.0;
    }

    static synchronized void emit(String event, String fields) {
        System.out.println("{\"event\":\"" + event + "\"" + (fields.isEmpty() ? "" : "," + fields)
            + ",\"t\":" + String.format(Locale.ROOT, "%.3f", now()) + "}");
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            opts.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", opts.get("bootstrap"));
        props.put("group.id", opts.get("group"));
        props.put("share.acknowledgement.mode", "explicit");
        props.put("max.poll.records", opts.getOrDefault("max-poll-records", "500"));
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        boolean hold = "hold".equals(opts.get("mode"));
        Duration pollTimeout = Duration.ofMillis(Long.parseLong(opts.getOrDefault("poll-ms", "100")));

        KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props);
        CountDownLatch done = new CountDownLatch(1);
        Thread main = Thread.currentThread();
        final boolean[] stopping = {false};
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping[0] = true;
            consumer.wakeup();
            try {
                done.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        try {
            consumer.subscribe(List.of(opts.get("topic")));
            emit("started", "");
            long handled = 0;
            long redelivered = 0;
            double lastReport = 0;
            long reported = 0;
            boolean holding = false;
            while (!stopping[0]) {
                if (holding) {
                    try {
                        Thread.sleep(50);
                    } catch (InterruptedException e) {
                        break;
                    }
                    continue;
                }
                ConsumerRecords<byte[], byte[]> polled;
                try {
                    polled = consumer.poll(pollTimeout);
                } catch (WakeupException e) {
                    continue;
                }
                if (polled.isEmpty()) {
                    if (handled != reported) {  // the last records before an idle spell
                        reported = handled;
                        emit("progress", "\"handled\":" + handled + ",\"redelivered\":" + redelivered);
                    }
                    continue;
                }
                if (hold) {
                    emit("held", "\"records\":" + polled.count());
                    holding = true;
                    continue;
                }
                long before = redelivered;
                for (ConsumerRecord<byte[], byte[]> r : polled) {
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                    handled++;
                    if (r.deliveryCount().map(Number::intValue).orElse(1) > 1) {
                        redelivered++;
                    }
                }
                double t = now();
                if (redelivered != before || t - lastReport >= 100) {
                    lastReport = t;
                    reported = handled;
                    emit("progress", "\"handled\":" + handled + ",\"redelivered\":" + redelivered);
                }
            }
        } finally {
            consumer.close();
            emit("closed", "");
            done.countDown();
        }
    }
}

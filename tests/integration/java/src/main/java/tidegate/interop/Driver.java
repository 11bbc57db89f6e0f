// Drive Kafka's own Java client (org.apache.kafka:kafka-clients) against a broker, for
// the Python integration tests in tests/integration/test_java_client.py. One JVM start costs
// about a second, so each command runs several checks and prints one JSON line per
// result; the last line of a successful run is {"done": ...}. Any error exits with
// status 1 and the stack trace on stderr.
//
//   java -jar driver.jar produce <bootstrap> <topic> <count>
//       idempotent producer (acks=all), keys k<i>, values v<i>, murmur2 partitioner
//   java -jar driver.jar txn <bootstrap> <topic> <transactional.id> <group>
//       commit (c0..c9, with offset 42 of <topic>-0 for <group>), abort (a0..a9), commit
//       (d0..d9); then read_committed and read_uncommitted consumers read the topic to
//       its end, and the group's committed offset is read back
//   java -jar driver.jar group <bootstrap> <topic> <group> <classic|consumer> <count>
//       two members of one group (two threads) read <count> records and commit; prints
//       each member's assignment once both have one and all records are read
//   java -jar driver.jar admin <bootstrap> <topic>
//       createTopics (and again), describeTopics, listOffsets, describeConfigs,
//       incrementalAlterConfigs, deleteRecords, describeCluster, listGroups,
//       describeTransactions
//   java -jar driver.jar misuse <bootstrap> <topic>
//       what the Admin client gets for unknown names, bad arguments and dry runs, and
//       the details (synonyms, authorized operations, producers) beside the main path;
//       each check prints {"<name>": result or exception class}
package tidegate.interop;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class Driver {
    private Driver() {}

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]));
            case "txn" -> txn(args[1], args[2], args[3], args[4]);
            case "group" -> group(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]));
            case "admin" -> admin(args[1], args[2]);
            case "misuse" -> misuse(args[1], args[2]);
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
        System.exit(0);  // the clients' non-daemon threads must not keep the JVM up
    }

    // ---- output: one JSON object a line (no JSON library: strings, numbers, lists, maps)

    static void out(Object... kv) {
        Map<String, Object> m = new java.util.LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        System.out.println(json(m));
        System.out.flush();
    }

    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Map<?, ?> m) {
            List<String> parts = new ArrayList<>();
            for (Map.Entry<?, ?> e : m.entrySet()) parts.add(json(String.valueOf(e.getKey())) + ":" + json(e.getValue()));
            return "{" + String.join(",", parts) + "}";
        }
        if (o instanceof Collection<?> c) {
            List<String> parts = new ArrayList<>();
            for (Object x : c) parts.add(json(x));
            return "[" + String.join(",", parts) + "]";
        }
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : o.toString().toCharArray()) {
            if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
            else if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
            else sb.append(ch);
        }
        return sb.append('"').toString();
    }

    static Properties props(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    static KafkaProducer<String, String> producer(Properties p) {
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(Properties p) {
        p.putIfAbsent(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.putIfAbsent(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    // ---- produce

    static void produce(String bootstrap, String topic, int count) throws Exception {
        try (KafkaProducer<String, String> prod = producer(props(bootstrap))) {
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < count; i++) fs.add(prod.send(new ProducerRecord<>(topic, "k" + i, "v" + i)));
            Map<Integer, Integer> perPartition = new TreeMap<>();
            for (var f : fs) perPartition.merge(f.get().partition(), 1, Integer::sum);
            out("partitions", perPartition);
        }
        out("done", count);
    }

    // ---- transactions

    static void txn(String bootstrap, String topic, String tid, String group) throws Exception {
        Properties p = props(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
        TopicPartition tp0 = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> prod = producer(p)) {
            prod.initTransactions();
            String[] prefixes = {"c", "a", "d"};
            for (String prefix : prefixes) {
                prod.beginTransaction();
                for (int i = 0; i < 10; i++) prod.send(new ProducerRecord<>(topic, i % 2, null, prefix + i));
                if (prefix.equals("c")) {
                    prod.sendOffsetsToTransaction(Map.of(tp0, new OffsetAndMetadata(42)),
                        new ConsumerGroupMetadata(group));
                }
                if (prefix.equals("a")) {
                    prod.flush();
                    prod.abortTransaction();
                } else {
                    prod.commitTransaction();
                }
                out("txn", prefix, "committed", !prefix.equals("a"));
            }
        }
        for (String iso : new String[] {"read_committed", "read_uncommitted"}) {
            Properties cp = props(bootstrap);
            cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, iso);
            try (KafkaConsumer<String, String> c = consumer(cp)) {
                List<TopicPartition> tps = List.of(tp0, new TopicPartition(topic, 1));
                c.assign(tps);
                c.seekToBeginning(tps);
                Map<TopicPartition, Long> end = c.endOffsets(tps);
                List<String> values = new ArrayList<>();
                long deadline = System.currentTimeMillis() + 30_000;
                while (System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) values.add(r.value());
                    boolean atEnd = true;
                    for (TopicPartition tp : tps) atEnd &= c.position(tp) >= end.get(tp);
                    if (atEnd) break;
                }
                Collections.sort(values);
                Map<String, Long> ends = new TreeMap<>();
                end.forEach((tp, o) -> ends.put(String.valueOf(tp.partition()), o));
                out("isolation", iso, "values", values, "end", ends);
            }
        }
        try (Admin a = Admin.create(props(bootstrap))) {
            Map<TopicPartition, OffsetAndMetadata> off =
                a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            OffsetAndMetadata om = off.get(tp0);
            out("group_offset", om == null ? null : om.offset());
        }
        out("done", true);
    }

    // ---- consumer groups: two members in one JVM

    static void group(String bootstrap, String topic, String group, String protocol, int count)
            throws Exception {
        Map<String, Set<Integer>> assigned = new ConcurrentHashMap<>();
        AtomicInteger consumed = new AtomicInteger();
        Set<String> seen = ConcurrentHashMap.newKeySet();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        java.util.concurrent.atomic.AtomicBoolean settled = new java.util.concurrent.atomic.AtomicBoolean();
        Map<String, Set<Integer>> snapshot = new TreeMap<>();
        AtomicInteger commitRetries = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 40_000;
        for (String name : new String[] {"m1", "m2"}) {
            Thread t = new Thread(() -> {
                Properties p = props(bootstrap);
                p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
                p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
                p.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
                if (protocol.equals("classic")) {
                    p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
                    p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
                }
                try (KafkaConsumer<String, String> c = consumer(p)) {
                    c.subscribe(List.of(topic));
                    while (System.currentTimeMillis() < deadline && !settled.get()) {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                            if (seen.add(r.partition() + "/" + r.offset())) consumed.incrementAndGet();
                        }
                        commit(c, commitRetries);
                        Set<Integer> mine = new TreeSet<>();
                        for (TopicPartition tp : c.assignment()) mine.add(tp.partition());
                        synchronized (assigned) {
                            assigned.put(name, mine);
                            // the first member to see the group settled stops both: a
                            // member that leaves first hands its partitions to the other
                            if (!settled.get() && consumed.get() >= count && assigned.size() == 2
                                    && assigned.values().stream().noneMatch(Set::isEmpty)
                                    && disjoint(assigned)) {
                                snapshot.putAll(assigned);
                                settled.set(true);
                            }
                        }
                    }
                    for (int i = 0; i < 3 && !commit(c, commitRetries); i++) { /* again */ }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                    settled.set(true);  // stop the other member too
                }
            }, name);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) t.join();
        if (failure.get() != null) throw new RuntimeException(failure.get());
        out("assignments", settled.get() ? snapshot : assigned, "consumed", consumed.get(),
            "commit_retries", commitRetries.get());
        try (Admin a = Admin.create(props(bootstrap))) {
            Map<TopicPartition, OffsetAndMetadata> off =
                a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            long total = 0;
            for (OffsetAndMetadata om : off.values()) total += om.offset();
            out("committed_total", total);
            // both members have left: the group is Empty and keeps its type
            for (GroupListing g : a.listGroups().all().get()) {
                if (!g.groupId().equals(group)) continue;
                out("listed", Map.of("type", String.valueOf(g.type().orElse(null)),
                    "protocol", g.protocol(), "state", String.valueOf(g.groupState().orElse(null))));
            }
            ConsumerGroupDescription d = a.describeConsumerGroups(List.of(group)).all().get().get(group);
            out("described", Map.of("type", String.valueOf(d.type()), "state", String.valueOf(d.groupState()),
                "members", d.members().size(), "coordinator", d.coordinator().id()));
        }
        out("done", consumed.get());
    }

    // A commit racing a rebalance fails with CommitFailedException (under KIP-848: the
    // heartbeat that acknowledged a revocation moved the member to a new epoch while the
    // commit carried the old one, and the broker answers STALE_MEMBER_EPOCH, as Kafka's
    // does); applications commit again, so does the driver, and counts it
    static boolean commit(KafkaConsumer<String, String> c, AtomicInteger retries) {
        try {
            c.commitSync();
            return true;
        } catch (org.apache.kafka.clients.consumer.CommitFailedException e) {
            retries.incrementAndGet();
            return false;
        }
    }

    // each member reports its own view; the views agree once no partition is in two
    static boolean disjoint(Map<String, Set<Integer>> assigned) {
        Set<Integer> all = new TreeSet<>();
        int n = 0;
        for (Set<Integer> s : assigned.values()) {
            all.addAll(s);
            n += s.size();
        }
        return all.size() == n;
    }

    // ---- admin

    static void admin(String bootstrap, String topic) throws Exception {
        try (Admin a = Admin.create(props(bootstrap))) {
            NewTopic nt = new NewTopic(topic, 3, (short) 1)
                .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
            a.createTopics(List.of(nt)).all().get();
            out("created", topic);
            try {
                a.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
                out("created_again", "no error");
            } catch (ExecutionException e) {
                out("created_again", e.getCause().getClass().getSimpleName());
            }

            TopicDescription td = a.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo pi : td.partitions()) {
                parts.add(Map.of("partition", pi.partition(), "leader", pi.leader().id(),
                    "replicas", pi.replicas().size(), "isr", pi.isr().size()));
            }
            out("described", Map.of("name", td.name(), "internal", td.isInternal(),
                "id_set", !td.topicId().toString().equals("AAAAAAAAAAAAAAAAAAAAAA"), "partitions", parts));

            // data to list offsets of and delete: 10 records in partition 0
            Properties pp = props(bootstrap);
            try (KafkaProducer<String, String> prod = producer(pp)) {
                for (int i = 0; i < 10; i++) prod.send(new ProducerRecord<>(topic, 0, 1_700_000_000_000L + i * 1000, "k", "x" + i));
                prod.flush();
            }
            TopicPartition tp0 = new TopicPartition(topic, 0);
            out("offsets", listOffsets(a, tp0));

            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            out("configs", configs(a, res, "retention.ms", "cleanup.policy", "segment.bytes"));
            a.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND),
                new AlterConfigOp(new ConfigEntry("segment.bytes", ""), AlterConfigOp.OpType.DELETE)
            ))).all().get();
            out("altered", configs(a, res, "retention.ms", "cleanup.policy", "segment.bytes"));
            try {
                a.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all().get();
                out("alter_unknown", "no error");
            } catch (ExecutionException e) {
                out("alter_unknown", e.getCause().getClass().getSimpleName());
            }
            String brokerId = String.valueOf(a.describeCluster().nodes().get().iterator().next().id());
            ConfigResource brokerRes = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
            Config bc = a.describeConfigs(List.of(brokerRes)).all().get().get(brokerRes);
            ConfigEntry nparts = bc.get("num.partitions");
            out("broker_config", Map.of("entries", bc.entries().size(),
                "num.partitions", nparts == null ? "missing" : nparts.value(),
                "source", nparts == null ? "missing" : nparts.source().toString()));

            long low = a.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(4)))
                .lowWatermarks().get(tp0).get().lowWatermark();
            out("deleted_low_watermark", low);
            out("offsets_after_delete", listOffsets(a, tp0));
            try {
                a.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(1000))).all().get();
                out("delete_beyond_hw", "no error");
            } catch (ExecutionException e) {
                out("delete_beyond_hw", e.getCause().getClass().getSimpleName());
            }

            DescribeClusterResult dc = a.describeCluster();
            Collection<Node> nodes = dc.nodes().get();
            Node controller = dc.controller().get();
            out("cluster", Map.of("id", String.valueOf(dc.clusterId().get()), "nodes", nodes.size(),
                "controller", controller == null ? -1 : controller.id(),
                "host", nodes.iterator().next().host()));

            List<Object> groups = new ArrayList<>();
            for (GroupListing g : a.listGroups().all().get()) {
                groups.add(Map.of("id", g.groupId(), "type", String.valueOf(g.type().orElse(null)),
                    "protocol", g.protocol(), "state", String.valueOf(g.groupState().orElse(null))));
            }
            out("groups", groups);

            // a transaction left open by a producer: describeTransactions sees it Ongoing
            Properties tp = props(bootstrap);
            tp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, topic + "-tx");
            try (KafkaProducer<String, String> prod = producer(tp)) {
                prod.initTransactions();
                prod.beginTransaction();
                prod.send(new ProducerRecord<>(topic, 1, "k", "open")).get();
                TransactionDescription d = a.describeTransactions(List.of(topic + "-tx"))
                    .all().get().get(topic + "-tx");
                List<String> tps = new ArrayList<>();
                for (TopicPartition t : d.topicPartitions()) tps.add(t.toString());
                out("transaction", Map.of("state", d.state().toString(), "producer_id_set", d.producerId() >= 0,
                    "timeout_ms", d.transactionTimeoutMs(), "partitions", tps,
                    "start_set", d.transactionStartTimeMs().isPresent()));
                prod.abortTransaction();
            }
            try {
                a.describeTransactions(List.of("no-such-txn")).all().get();
                out("transaction_unknown", "no error");
            } catch (ExecutionException e) {
                out("transaction_unknown", e.getCause().getClass().getSimpleName());
            }
        }
        out("done", true);
    }

    interface Check { Object run() throws Exception; }

    static void check(String name, Check c) {
        Object r;
        try {
            r = c.run();
        } catch (ExecutionException e) {
            r = e.getCause().getClass().getSimpleName();
        } catch (Exception e) {
            r = "thrown " + e.getClass().getSimpleName();
        }
        out(name, r);
    }

    static void misuse(String bootstrap, String topic) throws Exception {
        Properties ap = props(bootstrap);
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
        try (Admin a = Admin.create(ap)) {
            a.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
            try (KafkaProducer<String, String> prod = producer(props(bootstrap))) {
                prod.send(new ProducerRecord<>(topic, 0, "k", "v")).get();
            }
            TopicPartition tp0 = new TopicPartition(topic, 0);
            String brokerId = String.valueOf(a.describeCluster().nodes().get().iterator().next().id());
            check("describe_unknown_topic", () -> a.describeTopics(List.of("no-such-topic")).allTopicNames().get());
            check("create_zero_partitions", () -> { a.createTopics(List.of(new NewTopic(topic + "-z", 0, (short) 1))).all().get(); return "ok"; });
            check("create_rf_3", () -> { a.createTopics(List.of(new NewTopic(topic + "-r", 1, (short) 3))).all().get(); return "ok"; });
            check("create_bad_config", () -> { a.createTopics(List.of(new NewTopic(topic + "-c", 1, (short) 1)
                .configs(Map.of("no.such.config", "1")))).all().get(); return "ok"; });
            check("create_bad_value", () -> { a.createTopics(List.of(new NewTopic(topic + "-v", 1, (short) 1)
                .configs(Map.of("retention.ms", "soon")))).all().get(); return "ok"; });
            check("create_bad_name", () -> { a.createTopics(List.of(new NewTopic("bad name!", 1, (short) 1))).all().get(); return "ok"; });
            check("create_validate_only", () -> {
                var r = a.createTopics(List.of(new NewTopic(topic + "-dry", 5, (short) 1)),
                    new org.apache.kafka.clients.admin.CreateTopicsOptions().validateOnly(true));
                r.all().get();
                return Map.of("partitions", r.numPartitions(topic + "-dry").get(),
                    "exists", a.listTopics().names().get().contains(topic + "-dry"));
            });
            check("create_defaults", () -> {
                var r = a.createTopics(List.of(new NewTopic(topic + "-d", java.util.Optional.empty(), java.util.Optional.empty())));
                r.all().get();
                return Map.of("partitions", r.numPartitions(topic + "-d").get(), "rf", r.replicationFactor(topic + "-d").get());
            });
            check("describe_configs_unknown_topic", () -> a.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic"))).all().get().toString());
            check("synonyms", () -> {
                ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                Config c = a.describeConfigs(List.of(res), new org.apache.kafka.clients.admin.DescribeConfigsOptions()
                    .includeSynonyms(true).includeDocumentation(true)).all().get().get(res);
                Map<String, Object> r = new TreeMap<>();
                for (String n : new String[] {"retention.ms", "segment.bytes", "min.insync.replicas", "message.timestamp.type"}) {
                    ConfigEntry e = c.get(n);
                    List<String> syn = new ArrayList<>();
                    for (ConfigEntry.ConfigSynonym sy : e.synonyms()) syn.add(sy.name() + "=" + sy.value() + "@" + sy.source());
                    r.put(n, Map.of("value", String.valueOf(e.value()), "type", e.type().toString(), "synonyms", syn,
                        "doc", e.documentation() != null && !e.documentation().isEmpty(),
                        "readOnly", e.isReadOnly(), "sensitive", e.isSensitive()));
                }
                return r;
            });
            check("alter_broker_dynamic", () -> {
                ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
                a.incrementalAlterConfigs(Map.of(br, List.of(new AlterConfigOp(
                    new ConfigEntry("log.cleaner.threads", "2"), AlterConfigOp.OpType.SET)))).all().get();
                ConfigEntry e = a.describeConfigs(List.of(br)).all().get().get(br).get("log.cleaner.threads");
                a.incrementalAlterConfigs(Map.of(br, List.of(new AlterConfigOp(
                    new ConfigEntry("log.cleaner.threads", ""), AlterConfigOp.OpType.DELETE)))).all().get();
                return e.value() + "@" + e.source();
            });
            check("alter_cluster_default", () -> {
                ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, "");
                a.incrementalAlterConfigs(Map.of(br, List.of(new AlterConfigOp(
                    new ConfigEntry("log.cleaner.min.cleanable.ratio", "0.6"), AlterConfigOp.OpType.SET)))).all().get();
                ConfigResource tr = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                ConfigEntry e = a.describeConfigs(List.of(tr)).all().get().get(tr).get("min.cleanable.dirty.ratio");
                a.incrementalAlterConfigs(Map.of(br, List.of(new AlterConfigOp(
                    new ConfigEntry("log.cleaner.min.cleanable.ratio", ""), AlterConfigOp.OpType.DELETE)))).all().get();
                ConfigEntry after = a.describeConfigs(List.of(tr)).all().get().get(tr).get("min.cleanable.dirty.ratio");
                return e.value() + "@" + e.source() + " then " + after.value() + "@" + after.source();
            });
            check("alter_static_broker", () -> {
                ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
                a.incrementalAlterConfigs(Map.of(br, List.of(new AlterConfigOp(
                    new ConfigEntry("log.dirs", "/tmp/x"), AlterConfigOp.OpType.SET)))).all().get();
                return "ok";
            });
            check("alter_validate_only", () -> {
                ConfigResource tr = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                a.incrementalAlterConfigs(Map.of(tr, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "1"),
                    AlterConfigOp.OpType.SET))), new org.apache.kafka.clients.admin.AlterConfigsOptions().validateOnly(true)).all().get();
                return a.describeConfigs(List.of(tr)).all().get().get(tr).get("retention.ms").value();
            });
            check("alter_append_non_list", () -> {
                ConfigResource tr = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                a.incrementalAlterConfigs(Map.of(tr, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "1"),
                    AlterConfigOp.OpType.APPEND)))).all().get();
                return "ok";
            });
            check("delete_records_hw", () -> a.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(-1)))
                .lowWatermarks().get(tp0).get().lowWatermark());
            check("cluster_operations", () -> {
                var ops = a.describeCluster(new org.apache.kafka.clients.admin.DescribeClusterOptions()
                    .includeAuthorizedOperations(true)).authorizedOperations().get();
                return ops == null ? "null" : new TreeSet<>(ops.stream().map(Object::toString).toList());
            });
            check("topic_operations", () -> {
                var d = a.describeTopics(List.of(topic), new org.apache.kafka.clients.admin.DescribeTopicsOptions()
                    .includeAuthorizedOperations(true)).allTopicNames().get().get(topic);
                return d.authorizedOperations() == null ? "null" : new TreeSet<>(d.authorizedOperations().stream().map(Object::toString).toList());
            });
            check("describe_unknown_group", () -> {
                var d = a.describeConsumerGroups(List.of("no-such-group")).all().get().get("no-such-group");
                return Map.of("state", String.valueOf(d.groupState()), "type", String.valueOf(d.type()), "members", d.members().size());
            });
            check("list_group_offsets_unknown", () -> a.listConsumerGroupOffsets("no-such-group").partitionsToOffsetAndMetadata().get().toString());
            check("describe_producers", () -> {
                var st = a.describeProducers(List.of(tp0)).partitionResult(tp0).get().activeProducers();
                List<Object> r = new ArrayList<>();
                for (var ps : st) r.add(Map.of("epoch", ps.producerEpoch(), "last_seq", ps.lastSequence(),
                    "txn_start", String.valueOf(ps.currentTransactionStartOffset())));
                return r;
            });
            check("list_transactions", () -> {
                Properties tp = props(bootstrap);
                tp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, topic + "-tx");
                try (KafkaProducer<String, String> prod = producer(tp)) {
                    prod.initTransactions();
                    prod.beginTransaction();
                    prod.send(new ProducerRecord<>(topic, 1, "k", "v"));
                    prod.commitTransaction();
                }
                for (var l : a.listTransactions().all().get()) {
                    if (l.transactionalId().equals(topic + "-tx")) return l.state().toString();
                }
                return "not listed";
            });
            check("describe_log_dirs", () -> {
                var m = a.describeLogDirs(List.of(Integer.parseInt(brokerId))).allDescriptions().get().get(Integer.parseInt(brokerId));
                Map<String, Object> r = new TreeMap<>();
                for (var e : m.entrySet()) r.put("dir", Map.of("error", String.valueOf(e.getValue().error()),
                    "has_tp0", e.getValue().replicaInfos().containsKey(tp0),
                    "total_set", e.getValue().totalBytes().isPresent()));
                return r;
            });
            check("describe_features", () -> {
                var f = a.describeFeatures().featureMetadata().get();
                Map<String, Object> r = new TreeMap<>();
                f.finalizedFeatures().forEach((k, v) -> r.put(k, v.minVersionLevel() + ".." + v.maxVersionLevel()));
                return r;
            });
            check("delete_topic_unknown", () -> { a.deleteTopics(List.of("no-such-topic")).all().get(); return "ok"; });
        }
        out("done", true);
    }

    static Map<String, Object> listOffsets(Admin a, TopicPartition tp) throws Exception {
        Map<String, Object> r = new TreeMap<>();
        Map<String, OffsetSpec> specs = Map.of("earliest", OffsetSpec.earliest(), "latest", OffsetSpec.latest(),
            "max_timestamp", OffsetSpec.maxTimestamp(), "at_ts", OffsetSpec.forTimestamp(1_700_000_003_500L));
        for (var e : specs.entrySet()) {
            ListOffsetsResult.ListOffsetsResultInfo info = a.listOffsets(Map.of(tp, e.getValue())).partitionResult(tp).get();
            r.put(e.getKey(), Map.of("offset", info.offset(), "timestamp", info.timestamp()));
        }
        return r;
    }

    static Map<String, Object> configs(Admin a, ConfigResource res, String... names) throws Exception {
        Config c = a.describeConfigs(List.of(res)).all().get().get(res);
        Map<String, Object> r = new TreeMap<>();
        for (String n : names) {
            ConfigEntry e = c.get(n);
            r.put(n, e == null ? null : Map.of("value", String.valueOf(e.value()), "source", e.source().toString(),
                "default", e.isDefault()));
        }
        return r;
    }
}

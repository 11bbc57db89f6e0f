/* A produce load generator in C on librdkafka, for bench/produce_consume.py (`--load c`).
 *
 * Why C: one Python thread calling confluent-kafka's Producer.produce() spends ~3.5 us
 * of CPU per record, more than the broker it loads, so on a 2-core machine the load
 * generator ran out of CPU first. This program makes the same records (a decimal key,
 * one random value of --size bytes reused for every record) with the same producer
 * settings as the Python load, so only the cost of making them changes.
 *
 * It is compiled at bench time by bench/load.py (cc ... $(pkg-config --libs rdkafka)):
 *
 *     load_producer BOOTSTRAP TOPIC RECORDS SIZE ACKS [PARTITIONS [LINGER_MS [CHUNK]]]
 *
 * Records go to the PARTITIONS partitions round-robin, CHUNK (default 1,000, at most
 * 1,000) records to one partition before the next: 1 spreads them one by one, as
 * bench/scale.py's load does, to measure the broker's cost per partition in a request.
 *
 * and prints one line of JSON: records, bytes, seconds (first produce to last
 * delivery), failed deliveries, and this process's user + system CPU seconds.
 * The exit status is 0 only when every record was delivered.
 */
#include <librdkafka/rdkafka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static long long failed;
static char first_error[256];

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (failed++ == 0)
            snprintf(first_error, sizeof first_error, "%s", rd_kafka_err2str(m->err));
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);  /* every thread of the process: librdkafka's too */
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "load_producer: %s=%s: %s\n", name, value, err);
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s BOOTSTRAP TOPIC RECORDS SIZE ACKS [PARTITIONS [LINGER_MS [CHUNK]]]\n", argv[0]);
        return 2;
    }
    const char *topic = argv[2];
    long long records = atoll(argv[3]);
    size_t size = (size_t)atoll(argv[4]);
    long long partitions = argc > 6 ? atoll(argv[6]) : 1;
    if (partitions < 1)
        partitions = 1;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[1]);
    set(conf, "acks", argv[5]);
    set(conf, "linger.ms", argc > 7 ? argv[7] : "5");
    /* as the Python load (bench/produce_consume.py's produce()) */
    set(conf, "batch.size", "1000000");
    set(conf, "compression.type", "none");
    set(conf, "enable.idempotence", "false");
    set(conf, "queue.buffering.max.kbytes", "1048576");
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (rk == NULL) {
        fprintf(stderr, "load_producer: %s\n", err);
        return 2;
    }
    char *value = malloc(size ? size : 1);
    FILE *urandom = fopen("/dev/urandom", "rb");
    if (value == NULL || urandom == NULL || fread(value, 1, size, urandom) != size) {
        fprintf(stderr, "load_producer: no random value\n");
        return 2;
    }
    fclose(urandom);

    /* Chunks of records go to one partition each, round-robin: one call (one
     * lock of the partition's queue) per chunk instead of one per record. The value is
     * not copied into each message (librdkafka copies it once into the request). */
    enum { MAX_CHUNK = 1000 };
    static rd_kafka_message_t batch[MAX_CHUNK];
    static char keys[MAX_CHUNK][24];
    long long chunk_size = argc > 8 ? atoll(argv[8]) : MAX_CHUNK;
    if (chunk_size < 1 || chunk_size > MAX_CHUNK)
        chunk_size = MAX_CHUNK;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    double cpu0 = cpu_seconds(), t0 = now();
    long long i = 0, chunk = 0;
    while (i < records) {
        int cnt = records - i < chunk_size ? (int)(records - i) : (int)chunk_size;
        for (int j = 0; j < cnt; j++) {
            batch[j].payload = value;
            batch[j].len = size;
            batch[j].key_len = (size_t)snprintf(keys[j], sizeof keys[j], "%lld", i + j);
            batch[j].key = keys[j];  /* librdkafka always copies keys */
            batch[j].err = RD_KAFKA_RESP_ERR_NO_ERROR;
        }
        int32_t partition = (int32_t)(chunk % partitions);
        int sent = 0;
        while (sent < cnt) {
            /* enqueues a prefix of the array; the rest failed with err set (queue full) */
            int ok = rd_kafka_produce_batch(rkt, partition, 0, batch + sent, cnt - sent);
            for (int j = sent + ok; j < cnt; j++) {
                if (batch[j].err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                    fprintf(stderr, "load_producer: produce: %s\n",
                            rd_kafka_err2str(batch[j].err));
                    return 1;
                }
                batch[j].err = RD_KAFKA_RESP_ERR_NO_ERROR;
            }
            sent += ok;
            rd_kafka_poll(rk, sent < cnt ? 10 : 0);  /* serve delivery reports */
        }
        i += cnt;
        chunk++;
    }
    rd_kafka_resp_err_t flushed = rd_kafka_flush(rk, 300 * 1000);
    double seconds = now() - t0, cpu = cpu_seconds() - cpu0;
    long long undelivered = flushed == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : rd_kafka_outq_len(rk);
    printf("{\"records\": %lld, \"bytes\": %lld, \"seconds\": %.6f, \"failed\": %lld, "
           "\"undelivered\": %lld, \"cpu_seconds\": %.4f, \"error\": \"%s\"}\n",
           records, records * (long long)size, seconds, failed, undelivered, cpu, first_error);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(value);
    return failed == 0 && undelivered == 0 ? 0 : 1;
}

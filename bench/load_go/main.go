// Command load_go is a produce load for Tidegate's broker benches on franz-go
// (github.com/twmb/franz-go), a Kafka client that, unlike librdkafka, puts the ready
// batches of every partition a broker leads into one Produce request. bench/load.py
// builds it into build/bench/ on first use and runs it as the `go` load.
//
// Usage: load_go BOOTSTRAP TOPIC RECORDS SIZE ACKS [PARTITIONS [LINGER_MS [CHUNK]]]
//
// The arguments are bench/load_producer.c's: RECORDS records of SIZE random bytes (one
// payload, a decimal key each), CHUNK records (default 1,000) to one partition after
// the other. The settings are Kafka's Java producer's defaults where the benches' other
// loads leave them open (requests of at most 1 MiB, 5 in flight per broker) and the
// benches' own otherwise (linger 5 ms, batches up to 1,000,000 bytes, no compression,
// no idempotence). It waits for every acknowledgement and prints one JSON line:
// {"bytes", "seconds", "cpu_seconds", "requests"} (its own user + system CPU; the
// Produce requests it wrote). A failed delivery exits with status 1.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "load_go: "+format+"\n", args...)
	os.Exit(1)
}

func arg(i int, def int, what string) int {
	if len(os.Args) <= i {
		return def
	}
	n, err := strconv.Atoi(os.Args[i])
	if err != nil || n < 0 || (n == 0 && what != "LINGER_MS") {
		fail("%s must be a positive integer, not %q", what, os.Args[i])
	}
	return n
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// requestHook counts the Produce requests the client wrote.
type requestHook struct{ produce atomic.Int64 }

func (h *requestHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		h.produce.Add(1)
	}
}

func main() {
	if len(os.Args) < 6 || len(os.Args) > 9 {
		fail("usage: load_go BOOTSTRAP TOPIC RECORDS SIZE ACKS [PARTITIONS [LINGER_MS [CHUNK]]]")
	}
	bootstrap, topic := os.Args[1], os.Args[2]
	n, size := arg(3, 0, "RECORDS"), arg(4, 0, "SIZE")
	partitions, linger, chunk := arg(6, 1, "PARTITIONS"), arg(7, 5, "LINGER_MS"), arg(8, 1000, "CHUNK")
	var acks kgo.Acks
	switch os.Args[5] {
	case "all", "-1":
		acks = kgo.AllISRAcks()
	case "1":
		acks = kgo.LeaderAck()
	case "0":
		acks = kgo.NoAck()
	default:
		fail("ACKS must be all, 1 or 0, not %q", os.Args[5])
	}
	hook := &requestHook{}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(acks),
		kgo.DisableIdempotentWrite(),
		kgo.ProducerLinger(time.Duration(linger)*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1_000_000),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.BrokerMaxWriteBytes(1<<20),
		kgo.MaxProduceRequestsInflightPerBroker(5),
		kgo.MaxBufferedRecords(1_000_000),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.WithHooks(hook),
	)
	if err != nil {
		fail("%v", err)
	}
	defer cl.Close()
	payload := make([]byte, size)
	if _, err := rand.Read(payload); err != nil {
		fail("%v", err)
	}
	ctx := context.Background()
	// the topic's metadata first, outside the timed run
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: payload}).FirstErr(); err != nil {
		fail("first record: %v", err)
	}
	var failed atomic.Int64
	var firstErr atomic.Value
	done := func(_ *kgo.Record, err error) {
		if err != nil && failed.Add(1) == 1 {
			firstErr.Store(err.Error())
		}
	}
	cpu0, start, before := cpuSeconds(), time.Now(), hook.produce.Load()
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{
			Key:       []byte(strconv.Itoa(i)),
			Value:     payload,
			Partition: int32((i / chunk) % partitions),
		}, done)
	}
	if err := cl.Flush(ctx); err != nil {
		fail("flush: %v", err)
	}
	seconds, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
	if k := failed.Load(); k > 0 {
		fail("%d deliveries failed, e.g. %v", k, firstErr.Load())
	}
	out, _ := json.Marshal(map[string]any{
		"bytes": n * size, "seconds": seconds, "cpu_seconds": cpu,
		"requests": hook.produce.Load() - before,
	})
	fmt.Println(string(out))
}

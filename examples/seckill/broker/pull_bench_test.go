package broker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/internal/proccpu"
	"github.com/seckillkit/seckill/examples/internal/stackharness"
)

// BenchmarkConsumePull puts the order consumer's two ways of pulling side
// by side in one run: a continuous pull per worker (Consumer.Messages, the
// default) and a Fetch per batch (FetchPerPull: a subscription per pull
// request). Each sub-benchmark gets a throwaway nats-server of its own
// and its b.N order messages published first (untimed); then 16 workers,
// batch 4 as in the service, consume and ack them, each handler holding
// its message 2 ms, as a transaction would. It reports the CPU per
// message of nats-server (from /proc) and of this process (the client),
// and messages per second.
//
//	cd examples && go test -run '^$' -bench BenchmarkConsumePull -benchtime 20000x ./seckill/broker/
func BenchmarkConsumePull(b *testing.B) {
	for _, fetch := range []bool{false, true} {
		b.Run(map[bool]string{false: "continuous", true: "fetch"}[fetch], func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			j, cpu := benchJetStream(ctx, b, JetStreamConfig{FetchPerPull: fetch, Depth: b.N + 100})
			for range b.N {
				if err := j.Publish(ctx, Message{ID: uuid.Must(uuid.NewV7()), Body: []byte(`{"reservation_id":"x"}`)}); err != nil {
					b.Fatal(err)
				}
			}
			server0, client0 := cpu()
			var handled atomic.Int64
			done := make(chan struct{})
			cctx, stop := context.WithCancel(ctx)
			b.ResetTimer()
			start := time.Now()
			wait := j.Consume(cctx, 16, func(context.Context, Message) error {
				time.Sleep(2 * time.Millisecond)
				if handled.Add(1) == int64(b.N) {
					close(done)
				}
				return nil
			})
			select {
			case <-done:
			case <-ctx.Done():
				b.Fatal("the messages were not all consumed in time")
			}
			if err := j.WaitIdle(ctx); err != nil { // every ack has reached the server
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			server, client1 := cpu()
			client := client1 - client0
			stop()
			wait()
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(per(server-server0), "server-µs/msg")
			b.ReportMetric(per(client), "client-µs/msg")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

// benchJetStream is a JetStream broker with cfg on a throwaway nats-server
// of the benchmark's own (both gone at its end), and cpu, which reads the
// CPU time nats-server (from /proc) and this process have used so far.
func benchJetStream(ctx context.Context, b *testing.B, cfg JetStreamConfig) (j *JetStream, cpu func() (server, client time.Duration)) {
	b.Helper()
	srv, err := stackharness.StartThrowawayNATS(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	j, err = NewJetStream(ctx, srv.URL, "b"+strings.ReplaceAll(uuid.NewString()[:8], "-", ""), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(j.Close)
	return j, func() (server, client time.Duration) {
		server, ok := proccpu.Of(srv.PID())
		if !ok {
			b.Fatal("cannot read nats-server's CPU time from /proc")
		}
		client, err := proccpu.Self()
		if err != nil {
			b.Fatal(err)
		}
		return server, client
	}
}

package broker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

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
			srv, err := stackharness.StartThrowawayNATS(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Stop()
			j, err := NewJetStream(ctx, srv.URL, "b"+strings.ReplaceAll(uuid.NewString()[:8], "-", ""),
				JetStreamConfig{FetchPerPull: fetch, Depth: b.N + 100}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			for range b.N {
				if err := j.Publish(ctx, Message{ID: uuid.Must(uuid.NewV7()), Body: []byte(`{"reservation_id":"x"}`)}); err != nil {
					b.Fatal(err)
				}
			}
			server0, ok := procCPUTime(srv.PID())
			if !ok {
				b.Fatal("cannot read nats-server's CPU time from /proc")
			}
			client0 := rusageSelf(b)
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
			server, _ := procCPUTime(srv.PID())
			client := rusageSelf(b) - client0
			stop()
			wait()
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(per(server-server0), "server-µs/msg")
			b.ReportMetric(per(client), "client-µs/msg")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

// rusageSelf is this process's CPU time so far (user + system).
func rusageSelf(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPUTime is process pid's CPU time so far (user + system), from
// /proc/<pid>/stat; false when it cannot be read.
func procCPUTime(pid int) (time.Duration, bool) {
	if pid == 0 {
		return 0, false
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * (time.Second / 100), true // USER_HZ is 100 on Linux
}

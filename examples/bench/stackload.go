package main

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// lateAfter is how far behind its scheduled time a click may leave before
// it counts as late: the generator could not keep up.
const lateAfter = 10 * time.Millisecond

// maxInFlight bounds the clicks waiting for their answer; a click over it
// is not sent and counts as failed (status -1).
const maxInFlight = 4096

// clickLoad is an open-loop load: click i, by buyer first+i, leaves at
// start + i/rate whether or not earlier clicks were answered.
type clickLoad struct {
	url    string // POST /orders
	client *http.Client
	rate   int
	first  int64    // the first click's buyer
	tokens []string // the buyers' bearer tokens, by click
}

// clicks is what the clicks of one load did, by click.
type clicks struct {
	start  time.Time
	rate   int
	first  int64
	status []int32 // HTTP status; 0: no answer (transport error); -1: not sent
	late   atomic.Int64
}

// sched is click i's scheduled time.
func (c *clicks) sched(i int) time.Time {
	return c.start.Add(time.Duration(int64(i) * int64(time.Second) / int64(c.rate)))
}

// run sends every click on schedule from start, then waits for the
// answers (each bounded by the client's timeout).
func (l clickLoad) run(ctx context.Context, start time.Time) *clicks {
	res := &clicks{start: start, rate: l.rate, first: l.first, status: make([]int32, len(l.tokens))}
	var (
		wg       sync.WaitGroup
		inFlight atomic.Int64
	)
	for i := 0; i < len(l.tokens) && ctx.Err() == nil; {
		now := time.Now()
		for ; i < len(l.tokens) && !res.sched(i).After(now); i++ {
			if now.Sub(res.sched(i)) > lateAfter {
				res.late.Add(1)
			}
			if inFlight.Load() >= maxInFlight {
				res.status[i] = -1
				continue
			}
			inFlight.Add(1)
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				defer inFlight.Add(-1)
				atomic.StoreInt32(&res.status[i], int32(l.click(ctx, l.tokens[i])))
			}(i)
		}
		if i < len(l.tokens) {
			time.Sleep(time.Until(res.sched(i)))
		}
	}
	wg.Wait()
	return res
}

// click POSTs one order request, as a buyer's client does: the buyer's
// token and an idempotency key, no body (the item on sale). It returns the
// answer's status, 0 when there was none.
func (l clickLoad) click(ctx context.Context, token string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := l.client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var buf [512]byte
	for { // read the body to its end, so the connection is reused
		if _, err := resp.Body.Read(buf[:]); err != nil {
			break
		}
	}
	return resp.StatusCode
}

// newLoadClient is an HTTP client that keeps a connection per click in
// flight: no client-side queue in front of the service.
func newLoadClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = maxInFlight, maxInFlight
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

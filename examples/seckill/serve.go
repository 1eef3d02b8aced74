package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/web"
)

// api is the service running behind its HTTP face (package web), as -serve
// runs it: the consumers, the relays and the timeout canceller at work.
type api struct {
	*web.API
	s    *service
	stop func()
}

// newAPI provisions the sale, builds the HTTP face with the operator page
// and starts the consumers, the relays and the timeout canceller. Close
// stops them.
func newAPI(ctx context.Context, pool *pgxpool.Pool, cfg config, log *slog.Logger) (*api, error) {
	cfg.DupRate = 0 // no duplicates on purpose: those are for the default run
	s, err := newService(ctx, pool, cfg, log)
	if err != nil {
		return nil, err
	}
	w, err := web.New(ctx, s, cfg.Security, true)
	if err == nil {
		if err = s.registerAuditFigure(w.Monitor()); err != nil {
			w.Close()
		}
	}
	if err != nil {
		s.close()
		return nil, err
	}
	stopBG, err := s.startBackground(ctx, cfg.Consumers, cfg.Relays)
	if err != nil {
		w.Close()
		s.close()
		return nil, err
	}
	cctx, stopCancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.cancelLoop(cctx) }()
	return &api{API: w, s: s, stop: func() { w.Close(); stopCancel(); <-done; stopBG(); s.close() }}, nil
}

// Close stops the background work; it waits for it to finish.
func (a *api) Close() { a.stop() }

// pageHooks serves the operator view on addr during a run (nothing when
// addr is empty) and returns its URL: the monitor starts when the service
// is up and ends with the run's own audit and reconciliation. stop closes
// the server.
func pageHooks(addr string) (hooks *saleHooks, url string, stop func(), err error) {
	if addr == "" {
		return nil, "", func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("-page %s: %w", addr, err)
	}
	var (
		mu  sync.Mutex
		mon *web.Monitor
	)
	mux := http.NewServeMux()
	// withMonitor answers with the page's monitor once the sale has one.
	withMonitor := func(starting string, serve func(*web.Monitor, http.ResponseWriter, *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			m := mon
			mu.Unlock()
			if m == nil {
				http.Error(w, starting, http.StatusServiceUnavailable)
				return
			}
			serve(m, w, r)
		}
	}
	mux.HandleFunc("GET /{$}", withMonitor("the sale is starting; reload in a moment", (*web.Monitor).ServePage))
	mux.HandleFunc("GET /events", withMonitor("the sale is starting", (*web.Monitor).ServeEvents))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	url = "http://" + ln.Addr().String() + "/"
	hooks = &saleHooks{
		started: func(s *service) {
			m := web.StartMonitor(s.life, s)
			mu.Lock()
			mon = m
			mu.Unlock()
		},
		finished: func(r report) {
			mu.Lock()
			m := mon
			mu.Unlock()
			if m != nil {
				m.Finish(r.Checks, r.Reconciliation)
			}
		},
	}
	stop = func() {
		mu.Lock()
		m := mon
		mu.Unlock()
		if m != nil {
			m.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
	}
	return hooks, url, stop, nil
}

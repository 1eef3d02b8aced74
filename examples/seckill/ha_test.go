//go:build ha

package main

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// TestHASaleWithFailover runs the example's -ha mode: the sale on a
// throwaway Patroni cluster with the leader killed half-way through the
// clicks. runHA fails when the audit or the reconciliation fails or the
// old leader does not rejoin. It takes about a minute, so it runs only
// with -tags ha:
//
//	go test -tags ha -race -count=1 -run TestHASaleWithFailover -v ./examples/seckill/
func TestHASaleWithFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg := defaultConfig()
	cfg.Stack, cfg.Schema, cfg.Stock, cfg.Buyers = stackMemory, "ha_sale", 2000, 8000
	if err := runHA(ctx, cfg, 0.5, false, slog.LevelWarn); err != nil {
		t.Fatal(err)
	}
}

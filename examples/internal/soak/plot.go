package soak

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/seckillkit/seckill/examples/internal/svgplot"
)

// PlotFiles are the charts WriteSVG writes, by file name: table sizes,
// the outbox claim's cost, and the backlog (rows left after each round's
// purge, and dead tuples waiting for vacuum), each over the run's seconds.
var PlotFiles = []string{"soak-sizes.svg", "soak-claim.svg", "soak-backlog.svg"}

// WriteSVG writes the samples as the three line charts of PlotFiles into
// dir. It writes nothing and returns an error for no samples.
func WriteSVG(dir string, samples []Sample) error {
	if len(samples) == 0 {
		return fmt.Errorf("soak: no samples to plot")
	}
	x := make([]float64, len(samples))
	series := func(name string, f func(Sample) float64) svgplot.Series {
		s := svgplot.Series{Name: name, X: x, Y: make([]float64, len(samples))}
		for i, v := range samples {
			s.Y[i] = f(v)
		}
		return s
	}
	for i, s := range samples {
		x[i] = s.Elapsed.Seconds()
	}
	kB := func(b int64) float64 { return float64(b) / 1024 }
	charts := []svgplot.LineChart{
		{Title: "Table sizes after each round's purge (table + indexes + TOAST)", XLabel: "seconds", YLabel: "kB", Series: []svgplot.Series{
			series("consumer_inbox", func(s Sample) float64 { return kB(s.InboxBytes) }),
			series("event_outbox", func(s Sample) float64 { return kB(s.OutboxBytes) }),
			series("sku_inventory", func(s Sample) float64 { return kB(s.BucketBytes) }),
			series("sku_inventory row versions", func(s Sample) float64 { return kB(max(s.BucketVersionBytes, 0)) }),
		}},
		{Title: "Outbox claim: latency and buffers touched", XLabel: "seconds", YLabel: "ms / buffers", Series: []svgplot.Series{
			series("claim latency ms", func(s Sample) float64 { return float64(s.ClaimLatency.Microseconds()) / 1000 }),
			series("claim buffers", func(s Sample) float64 { return float64(s.ClaimBlocks) }),
		}},
		{Title: "Backlog: rows left after the purge, dead tuples", XLabel: "seconds", YLabel: "rows", Series: []svgplot.Series{
			series("inbox rows", func(s Sample) float64 { return float64(s.InboxRows) }),
			series("outbox rows", func(s Sample) float64 { return float64(s.OutboxRows) }),
			series("inbox dead", func(s Sample) float64 { return float64(s.DeadInbox) }),
			series("outbox dead", func(s Sample) float64 { return float64(s.DeadOutbox) }),
		}},
	}
	for i, c := range charts {
		f, err := os.Create(filepath.Join(dir, PlotFiles[i]))
		if err != nil {
			return err
		}
		if _, err := c.WriteTo(f); err != nil {
			f.Close()
			return fmt.Errorf("soak: %s: %w", PlotFiles[i], err)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

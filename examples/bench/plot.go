package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/seckillkit/seckill/examples/internal/svgplot"
)

var svgPath = flag.String("svg", "", "also write the order table's orders/s per variant and cell as an SVG bar chart to this file")

// orderRow is one row of the order table, as plotted.
type orderRow struct {
	Variant            string
	Buckets, Consumers int
	PerSecond          float64
}

// writeOrdersSVG writes rows as a bar chart to path (nothing when path is
// empty): one group per cell, one bar per variant. limit, when positive,
// is drawn as a reference line labelled "limit".
func writeOrdersSVG(path string, rows []orderRow, limit float64) error {
	if path == "" {
		return nil
	}
	c := svgplot.BarChart{Title: "Order transaction: orders/s per variant and cell", YLabel: "orders/s", Ref: limit, RefLabel: "limit"}
	for _, r := range rows {
		buckets := "buckets"
		if r.Buckets == 1 {
			buckets = "bucket"
		}
		c.Bars = append(c.Bars, svgplot.Bar{Group: fmt.Sprintf("%d %s, %d consumers", r.Buckets, buckets, r.Consumers), Label: r.Variant, Value: r.PerSecond})
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

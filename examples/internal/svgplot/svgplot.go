// Package svgplot writes two small kinds of chart as standalone SVG: a bar
// chart with an optional reference line (the benchmark's orders/s per
// variant and cell, the limit marked) and a line chart over time (a soak's
// figures). The output is plain SVG 1.1 with no script and no external
// reference, so a README can show it as an image.
//
// Every mark carries a class and a data-value attribute ("bar",
// "ref", "series"), so tests and tools can read the figures back.
//
// It is hand-written rather than a plotting library: two chart kinds need
// a few hundred lines, the examples module gains no dependency to keep up
// with, and the same figures give the same bytes, so a committed chart
// diffs cleanly.
package svgplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// ErrInvalid is returned (wrapped) for a chart that cannot be drawn: no
// data, a negative, NaN or infinite value, series of unequal lengths. Nothing
// is written then.
var ErrInvalid = errors.New("svgplot: invalid chart")

// Bar is one bar: Label under it, Group above a run of bars that share it
// (e.g. a benchmark cell), Value its height.
type Bar struct {
	Group string
	Label string
	Value float64
}

// BarChart is a bar chart. Bars of the same Group are drawn side by side;
// a new Group starts after a gap. Ref, when positive, draws a horizontal
// reference line at that value, labelled RefLabel.
type BarChart struct {
	Title    string
	YLabel   string
	Bars     []Bar
	Ref      float64
	RefLabel string
	// Width and Height in pixels; 0 means 720 × 360.
	Width, Height int
}

// Series is one line of a LineChart: Y[i] at X[i] (X ascending).
type Series struct {
	Name string
	X, Y []float64
}

// LineChart is a line chart of one or more series over a shared x axis
// (e.g. seconds since the start).
type LineChart struct {
	Title, XLabel, YLabel string
	Series                []Series
	Width, Height         int // 0 means 720 × 300
}

// palette colours bars by label and lines by series, in order.
var palette = []string{"#3b6fb6", "#e08a1e", "#1d7a33", "#8e44ad", "#c62828", "#00838f"}

const (
	marginLeft   = 64
	marginRight  = 16
	marginTop    = 40
	marginBottom = 56
)

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// WriteTo writes the chart as an SVG document. An invalid chart gives an
// error wrapping ErrInvalid and writes nothing.
func (c BarChart) WriteTo(w io.Writer) (int64, error) {
	if len(c.Bars) == 0 {
		return 0, fmt.Errorf("%w: bar chart with no bars", ErrInvalid)
	}
	if !finite(c.Ref) || c.Ref < 0 {
		return 0, fmt.Errorf("%w: reference %v", ErrInvalid, c.Ref)
	}
	maxV := c.Ref
	for _, b := range c.Bars {
		if !finite(b.Value) || b.Value < 0 {
			return 0, fmt.Errorf("%w: bar %q/%q value %v", ErrInvalid, b.Group, b.Label, b.Value)
		}
		maxV = max(maxV, b.Value)
	}
	width, height := sizeOr(c.Width, 720), sizeOr(c.Height, 360)
	top := niceTop(maxV)
	plotW := float64(width - marginLeft - marginRight)
	plotH := float64(height - marginTop - marginBottom)
	y := func(v float64) float64 { return float64(marginTop) + plotH - v/top*plotH }

	// Layout: groups in order of first appearance, a gap of one bar between.
	var groups []string
	seen := map[string]bool{}
	labels := []string{}
	labelSeen := map[string]bool{}
	for _, b := range c.Bars {
		if !seen[b.Group] {
			seen[b.Group] = true
			groups = append(groups, b.Group)
		}
		if !labelSeen[b.Label] {
			labelSeen[b.Label] = true
			labels = append(labels, b.Label)
		}
	}
	slots := len(c.Bars) + len(groups) - 1
	slotW := plotW / float64(slots)

	var buf bytes.Buffer
	header(&buf, width, height, c.Title)
	axes(&buf, width, height, top, c.YLabel)
	slot := 0
	for gi, g := range groups {
		if gi > 0 {
			slot++ // gap
		}
		start := slot
		for _, b := range c.Bars {
			if b.Group != g {
				continue
			}
			x := float64(marginLeft) + float64(slot)*slotW + slotW*0.1
			colour := palette[indexOf(labels, b.Label)%len(palette)]
			fmt.Fprintf(&buf, `<rect class="bar" data-group="%s" data-label="%s" data-value="%g" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				esc(b.Group), esc(b.Label), b.Value, x, y(b.Value), slotW*0.8, y(0)-y(b.Value), colour, esc(b.Group), esc(b.Label), esc(format(b.Value)))
			fmt.Fprintf(&buf, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%s</text>`+"\n", x+slotW*0.4, y(b.Value)-3, esc(format(b.Value)))
			slot++
		}
		mid := float64(marginLeft) + (float64(start)+float64(slot))/2*slotW
		fmt.Fprintf(&buf, `<text class="group" x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>`+"\n", mid, height-marginBottom+16, esc(g))
	}
	if c.Ref > 0 {
		fmt.Fprintf(&buf, `<line class="ref" data-value="%g" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#c62828" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
			c.Ref, marginLeft, width-marginRight, y(c.Ref), y(c.Ref))
		fmt.Fprintf(&buf, `<text x="%d" y="%.1f" font-size="11" fill="#c62828" text-anchor="end">%s</text>`+"\n", width-marginRight, y(c.Ref)-4, esc(c.RefLabel+" "+format(c.Ref)))
	}
	legend(&buf, height, labels)
	buf.WriteString("</svg>\n")
	n, err := w.Write(buf.Bytes())
	return int64(n), err
}

// WriteTo writes the chart as an SVG document. An invalid chart gives an
// error wrapping ErrInvalid and writes nothing.
func (c LineChart) WriteTo(w io.Writer) (int64, error) {
	if len(c.Series) == 0 {
		return 0, fmt.Errorf("%w: line chart with no series", ErrInvalid)
	}
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) || len(s.X) == 0 {
			return 0, fmt.Errorf("%w: series %q has %d x and %d y values", ErrInvalid, s.Name, len(s.X), len(s.Y))
		}
		for i := range s.X {
			if !finite(s.X[i]) || !finite(s.Y[i]) || s.Y[i] < 0 || (i > 0 && s.X[i] < s.X[i-1]) {
				return 0, fmt.Errorf("%w: series %q point %d (%v, %v)", ErrInvalid, s.Name, i, s.X[i], s.Y[i])
			}
			minX, maxX, maxY = min(minX, s.X[i]), max(maxX, s.X[i]), max(maxY, s.Y[i])
		}
	}
	width, height := sizeOr(c.Width, 720), sizeOr(c.Height, 300)
	top := niceTop(maxY)
	plotW := float64(width - marginLeft - marginRight)
	plotH := float64(height - marginTop - marginBottom)
	spanX := maxX - minX
	if spanX == 0 {
		spanX = 1
	}
	x := func(v float64) float64 { return float64(marginLeft) + (v-minX)/spanX*plotW }
	y := func(v float64) float64 { return float64(marginTop) + plotH - v/top*plotH }

	var buf bytes.Buffer
	header(&buf, width, height, c.Title)
	axes(&buf, width, height, top, c.YLabel)
	fmt.Fprintf(&buf, `<text x="%d" y="%d" font-size="11" text-anchor="start">%s</text>`+"\n", marginLeft, height-marginBottom+16, esc(format(minX)))
	fmt.Fprintf(&buf, `<text x="%d" y="%d" font-size="11" text-anchor="end">%s</text>`+"\n", width-marginRight, height-marginBottom+16, esc(format(maxX)))
	fmt.Fprintf(&buf, `<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>`+"\n", float64(marginLeft)+plotW/2, height-marginBottom+16, esc(c.XLabel))
	var names []string
	for i, s := range c.Series {
		pts := make([]string, len(s.X))
		for j := range s.X {
			pts[j] = fmt.Sprintf("%.1f,%.1f", x(s.X[j]), y(s.Y[j]))
		}
		fmt.Fprintf(&buf, `<polyline class="series" data-name="%s" data-points="%d" points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n",
			esc(s.Name), len(s.X), strings.Join(pts, " "), palette[i%len(palette)])
		names = append(names, s.Name)
	}
	legend(&buf, height, names)
	buf.WriteString("</svg>\n")
	n, err := w.Write(buf.Bytes())
	return int64(n), err
}

func sizeOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return max(v, marginLeft+marginRight+40)
}

// niceTop rounds v up to 1, 2 or 5 × 10^k (1 for 0).
func niceTop(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func header(buf *bytes.Buffer, width, height int, title string) {
	fmt.Fprintf(buf, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(buf, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(buf, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
	fmt.Fprintf(buf, `<text class="title" x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, esc(title))
}

// axes draws the y axis with five ticks from 0 to top, its label, and the
// x axis line.
func axes(buf *bytes.Buffer, width, height int, top float64, ylabel string) {
	plotH := float64(height - marginTop - marginBottom)
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		yy := float64(marginTop) + plotH - v/top*plotH
		fmt.Fprintf(buf, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", marginLeft, width-marginRight, yy, yy)
		fmt.Fprintf(buf, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", marginLeft-6, yy+4, esc(format(v)))
	}
	fmt.Fprintf(buf, `<text x="14" y="%.1f" font-size="11" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`+"\n",
		float64(marginTop)+plotH/2, float64(marginTop)+plotH/2, esc(ylabel))
	fmt.Fprintf(buf, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>`+"\n", marginLeft, width-marginRight, height-marginBottom, height-marginBottom)
}

func legend(buf *bytes.Buffer, height int, names []string) {
	x := marginLeft
	for i, n := range names {
		fmt.Fprintf(buf, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/>`+"\n", x, height-22, palette[i%len(palette)])
		fmt.Fprintf(buf, `<text x="%d" y="%d" font-size="11">%s</text>`+"\n", x+14, height-13, esc(n))
		x += 24 + 7*len([]rune(n))
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return 0
}

// format prints a value compactly: integers without decimals.
func format(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	if math.Abs(v) >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

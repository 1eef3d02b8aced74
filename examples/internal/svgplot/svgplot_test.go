package svgplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// mark is an element of the output with its attributes.
type mark struct {
	name  string
	attrs map[string]string
	text  string
}

// parse checks that out is one well-formed <svg> document and returns its
// elements.
func parse(t *testing.T, out []byte) []mark {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(out))
	var marks []mark
	var open []int // indices of the elements open now
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("output is not XML: %v\n%s", err, out)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				if tk.Name.Local != "svg" || tk.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root element %v, want svg in the SVG namespace", tk.Name)
				}
			}
			depth++
			m := mark{name: tk.Name.Local, attrs: map[string]string{}}
			for _, a := range tk.Attr {
				m.attrs[a.Name.Local] = a.Value
			}
			marks = append(marks, m)
			open = append(open, len(marks)-1)
		case xml.EndElement:
			depth--
			open = open[:len(open)-1]
		case xml.CharData:
			if len(open) > 0 {
				marks[open[len(open)-1]].text += string(tk)
			}
		}
	}
	if roots != 1 {
		t.Fatalf("%d root elements, want 1", roots)
	}
	return marks
}

func ofClass(ms []mark, class string) []mark {
	var out []mark
	for _, m := range ms {
		if m.attrs["class"] == class {
			out = append(out, m)
		}
	}
	return out
}

func num(t *testing.T, m mark, attr string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(m.attrs[attr], 64)
	if err != nil {
		t.Fatalf("%s %s=%q: %v", m.name, attr, m.attrs[attr], err)
	}
	return v
}

func TestBarChart(t *testing.T) {
	c := BarChart{Title: "orders/s <per> cell & variant", YLabel: "orders/s", Ref: 5000, RefLabel: "limit",
		Bars: []Bar{
			{Group: "1 bucket, 8", Label: "raw", Value: 4000},
			{Group: "1 bucket, 8", Label: "kit", Value: 2000},
			{Group: "64 buckets, 32", Label: "raw", Value: 6000},
			{Group: "64 buckets, 32", Label: "kit", Value: 0},
		}}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	ms := parse(t, buf.Bytes())
	bars := ofClass(ms, "bar")
	if len(bars) != 4 {
		t.Fatalf("%d bars, want 4", len(bars))
	}
	base := num(t, bars[0], "y") + num(t, bars[0], "height") // the x axis
	for i, b := range bars {
		if got := num(t, b, "data-value"); got != c.Bars[i].Value {
			t.Errorf("bar %d data-value %v, want %v", i, got, c.Bars[i].Value)
		}
		if b.attrs["data-label"] != c.Bars[i].Label || b.attrs["data-group"] != c.Bars[i].Group {
			t.Errorf("bar %d is %q/%q, want %q/%q", i, b.attrs["data-group"], b.attrs["data-label"], c.Bars[i].Group, c.Bars[i].Label)
		}
		if bottom := num(t, b, "y") + num(t, b, "height"); math.Abs(bottom-base) > 0.2 {
			t.Errorf("bar %d stands at %v, the others at %v", i, bottom, base)
		}
		if i > 0 && num(t, b, "x") <= num(t, bars[i-1], "x") {
			t.Errorf("bar %d is not right of bar %d", i, i-1)
		}
	}
	// Heights are proportional to the values.
	h0, h1, h2 := num(t, bars[0], "height"), num(t, bars[1], "height"), num(t, bars[2], "height")
	if math.Abs(h0/h1-2) > 0.01 || math.Abs(h2/h0-1.5) > 0.01 || num(t, bars[3], "height") != 0 {
		t.Errorf("heights %v %v %v %v: not proportional to 4000, 2000, 6000, 0", h0, h1, h2, num(t, bars[3], "height"))
	}
	// Bars of the same label share a colour; a new label gets another.
	if bars[0].attrs["fill"] != bars[2].attrs["fill"] || bars[0].attrs["fill"] == bars[1].attrs["fill"] {
		t.Errorf("fills %q %q %q: want one colour per label", bars[0].attrs["fill"], bars[1].attrs["fill"], bars[2].attrs["fill"])
	}
	// A gap between groups.
	if gap, width := num(t, bars[2], "x")-num(t, bars[1], "x"), num(t, bars[1], "x")-num(t, bars[0], "x"); gap < 1.9*width {
		t.Errorf("no gap between the groups: step %v within, %v across", width, gap)
	}
	ref := ofClass(ms, "ref")
	if len(ref) != 1 || num(t, ref[0], "data-value") != 5000 {
		t.Fatalf("reference line %v, want one at 5000", ref)
	}
	// The reference line sits at 5000 on the bars' scale.
	yRef := num(t, ref[0], "y1")
	if want := base - h0*5000/4000; math.Abs(yRef-want) > 0.2 {
		t.Errorf("reference at y=%v, want %v", yRef, want)
	}
	if title := ofClass(ms, "title"); len(title) != 1 || title[0].text != c.Title {
		t.Errorf("title %v, want %q (escaped in the file, intact when parsed)", title, c.Title)
	}
	if groups := ofClass(ms, "group"); len(groups) != 2 || groups[0].text != "1 bucket, 8" {
		t.Errorf("group labels %v", groups)
	}

	// Without a reference: no line.
	c.Ref = 0
	buf.Reset()
	if _, err := c.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if ref := ofClass(parse(t, buf.Bytes()), "ref"); len(ref) != 0 {
		t.Errorf("a reference line with Ref 0")
	}
}

func TestLineChart(t *testing.T) {
	c := LineChart{Title: "soak", XLabel: "seconds", YLabel: "rows", Series: []Series{
		{Name: "table size", X: []float64{0, 10, 20, 30}, Y: []float64{0, 100, 50, 200}},
		{Name: "backlog", X: []float64{0, 30}, Y: []float64{5, 5}},
	}}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	lines := ofClass(parse(t, buf.Bytes()), "series")
	if len(lines) != 2 {
		t.Fatalf("%d polylines, want 2", len(lines))
	}
	var pts [][2]float64
	for _, p := range strings.Fields(lines[0].attrs["points"]) {
		xs, ys, _ := strings.Cut(p, ",")
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("point %q", p)
		}
		pts = append(pts, [2]float64{x, y})
	}
	if len(pts) != 4 || lines[0].attrs["data-points"] != "4" || lines[0].attrs["data-name"] != "table size" {
		t.Fatalf("first series: %v", lines[0].attrs)
	}
	// Evenly spaced in x; y inverted and proportional (200 is the top).
	if math.Abs((pts[1][0]-pts[0][0])-(pts[3][0]-pts[2][0])) > 0.2 {
		t.Errorf("x not evenly spaced: %v", pts)
	}
	if !(pts[3][1] < pts[1][1] && pts[1][1] < pts[2][1] && pts[2][1] < pts[0][1]) {
		t.Errorf("y order wrong for 0, 100, 50, 200: %v", pts)
	}
	if d1, d2 := pts[0][1]-pts[1][1], pts[0][1]-pts[3][1]; math.Abs(d2/d1-2) > 0.01 {
		t.Errorf("y not proportional: 100 → %v, 200 → %v", d1, d2)
	}
	if lines[0].attrs["stroke"] == lines[1].attrs["stroke"] {
		t.Errorf("two series in one colour")
	}
}

func TestInvalidChartsWriteNothing(t *testing.T) {
	for name, c := range map[string]io.WriterTo{
		"no bars":       BarChart{},
		"negative bar":  BarChart{Bars: []Bar{{Label: "a", Value: -1}}},
		"NaN bar":       BarChart{Bars: []Bar{{Label: "a", Value: math.NaN()}}},
		"infinite ref":  BarChart{Bars: []Bar{{Label: "a", Value: 1}}, Ref: math.Inf(1)},
		"no series":     LineChart{},
		"empty series":  LineChart{Series: []Series{{Name: "a"}}},
		"unequal":       LineChart{Series: []Series{{Name: "a", X: []float64{0, 1}, Y: []float64{1}}}},
		"x backwards":   LineChart{Series: []Series{{Name: "a", X: []float64{1, 0}, Y: []float64{1, 1}}}},
		"NaN point":     LineChart{Series: []Series{{Name: "a", X: []float64{0}, Y: []float64{math.NaN()}}}},
		"negative line": LineChart{Series: []Series{{Name: "a", X: []float64{0}, Y: []float64{-2}}}},
	} {
		var buf bytes.Buffer
		n, err := c.WriteTo(&buf)
		if !errors.Is(err, ErrInvalid) || n != 0 || buf.Len() != 0 {
			t.Errorf("%s: %d bytes, %v; want ErrInvalid and nothing written", name, buf.Len(), err)
		}
	}
}

func TestOnePointAndAllZero(t *testing.T) {
	var buf bytes.Buffer
	if _, err := (LineChart{Series: []Series{{Name: "a", X: []float64{3}, Y: []float64{0}}}}).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
		t.Errorf("a single zero point gives %s", s)
	}
	parse(t, buf.Bytes())
	buf.Reset()
	if _, err := (BarChart{Bars: []Bar{{Label: "a"}, {Label: "b"}}}).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
		t.Errorf("all-zero bars give %s", s)
	}
	parse(t, buf.Bytes())
}

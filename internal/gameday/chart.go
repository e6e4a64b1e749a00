package gameday

import (
	"bytes"
	"fmt"
	"html"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// chartRow is one row of the chart: one panel per peer.
type chartRow struct {
	title, unit string
	series      []series
}

// The chart's rows, on one time axis (seconds since the peer's run
// started).
var chartRows = []chartRow{
	{"Lag (source + tiers)", "records", []series{{"lag", func(p point) float64 { return float64(p.Lag) }, blue, nil}}},
	{"Enqueue and drain rate", "records/s", []series{
		{"enqueue", func(p point) float64 { return p.Enqueue }, orange, nil},
		{"drain (acknowledged)", func(p point) float64 { return p.Drain }, green, nil}}},
	{"Retry rate (redeliveries at the app)", "records/s", []series{{"retries", func(p point) float64 { return p.Retry }, red, nil}}},
	{"Breaker and dependency state", "state", []series{
		{"breaker (0 closed, 1 open, 2 probing)", func(p point) float64 { return max(p.Breaker, 0) }, red, func(p point) bool { return p.Breaker >= 0 }},
		{"dependency (0 ok, 1 failing, 2 refusing)", func(p point) float64 { return p.Depend }, gray, func(p point) bool { return p.Metrics }}}},
	{"Dead-lettered", "records", []series{{"DLQ", func(p point) float64 { return float64(p.DLQ) }, purple, nil}}},
}

type series struct {
	name  string
	value func(point) float64
	color color.Color
	// optional, when set, says whether a point has the series at all (the
	// breaker gauge exists only where kretry exports it).
	optional func(point) bool
}

// noLine is the legend entry of a series that is not drawn.
type noLine struct{}

func (noLine) Thumbnail(*draw.Canvas) {}

var (
	blue   = color.RGBA{31, 119, 180, 255}
	orange = color.RGBA{255, 127, 14, 255}
	green  = color.RGBA{44, 160, 44, 255}
	red    = color.RGBA{214, 39, 40, 255}
	purple = color.RGBA{148, 103, 189, 255}
	gray   = color.RGBA{127, 127, 127, 255}
	band   = color.RGBA{0, 0, 0, 14}
)

// Chart renders the report as one self-contained HTML page: the verdict,
// each peer's checks, and an SVG chart (fonts embedded) of lag, enqueue
// and drain rate, retry rate, breaker state and DLQ over time, the phases
// shaded and named.
func Chart(r *Report) []byte {
	var b bytes.Buffer
	b.WriteString("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>kretry gameday</title>\n" +
		"<style>body{font-family:sans-serif;margin:1.5em}td,th{padding:2px 8px;text-align:left}.pass{color:#2c2}.fail{color:#d22}</style></head><body>\n")
	verdict := `<span class="pass">every kretry check passed</span>`
	if !r.ranKretry() {
		verdict = html.EscapeString(notRun)
	} else if !r.OK {
		verdict = `<span class="fail">a kretry check failed</span>`
	}
	fmt.Fprintf(&b, "<h1>kretry gameday</h1><p>%s plan on the %s broker: %s (%.1fs).</p>\n", html.EscapeString(r.Plan.Name), html.EscapeString(r.Broker), verdict, float64(r.DurationMS)/1000)
	b.Write(chartSVG(r))
	for _, p := range r.Peers {
		fmt.Fprintf(&b, "<h2>%s</h2><p>%s</p><table><tr><th></th><th>group</th><th>check</th><th>value</th><th>limit</th><th>detail</th></tr>\n", html.EscapeString(p.Peer), html.EscapeString(p.Setup))
		for _, c := range p.Checks {
			cls, v := "pass", "PASS"
			if !c.Pass {
				cls, v = "fail", "FAIL"
			}
			fmt.Fprintf(&b, "<tr><td class=%q>%s</td><td>%s</td><td>%s</td><td>%s %s</td><td>%s</td><td>%s</td></tr>\n", cls, v,
				c.Group, html.EscapeString(c.What), num(c.Value), html.EscapeString(c.Unit), num(c.Limit), html.EscapeString(c.Detail))
		}
		b.WriteString("</table>\n<dl>\n")
		for _, a := range p.Answers {
			fmt.Fprintf(&b, "<dt><b>%s</b></dt><dd><pre style=\"white-space:pre-wrap\">%s</pre></dd>\n", html.EscapeString(a.Question), html.EscapeString(a.Answer))
		}
		b.WriteString("</dl>\n")
	}
	b.WriteString("</body></html>\n")
	return b.Bytes()
}

// chartSVG draws the panels: one column per peer, one row per chartRows
// entry, the y axes of a row shared so the peers compare at a glance.
func chartSVG(r *Report) []byte {
	cols, rows := len(r.Peers), len(chartRows)
	plots := make([][]*plot.Plot, rows)
	for i, row := range chartRows {
		plots[i] = make([]*plot.Plot, cols)
		ymax := 1.0
		for _, pr := range r.Peers {
			for _, s := range row.series {
				for _, pt := range pr.Timeline {
					ymax = max(ymax, s.value(pt))
				}
			}
		}
		for j, pr := range r.Peers {
			plots[i][j] = panel(row, pr, i == 0, i == rows-1, ymax)
		}
	}
	w, h := vg.Length(cols)*7*vg.Inch, vg.Length(rows)*2.4*vg.Inch
	c := vgsvg.NewWith(vgsvg.UseWH(w, h), vgsvg.EmbedFonts(true))
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return []byte("<p>chart: " + html.EscapeString(err.Error()) + "</p>")
	}
	return b.Bytes()
}

// panel is one peer's plot of one chart row, its y axis up to ymax; the
// top row names the peer and the phases, the bottom row the time axis.
func panel(row chartRow, pr *PeerReport, top, bottom bool, ymax float64) *plot.Plot {
	p := plot.New()
	p.Title.Text = row.title
	if top {
		p.Title.Text = pr.Peer + ": " + row.title
	}
	p.Y.Label.Text = row.unit
	p.Y.Min, p.Y.Max = 0, ymax*1.05
	if n := len(pr.Timeline); n > 0 { // a panel without lines gets the same time axis
		p.X.Min, p.X.Max = 0, pr.Timeline[n-1].T
	}
	p.X.Tick.Marker = secondsTicks{}
	if bottom {
		p.X.Label.Text = "seconds since start"
	}
	p.Add(bands{spans: pr.PhaseTimes, label: top})
	for _, s := range row.series {
		if s.optional != nil && !slices.ContainsFunc(pr.Timeline, s.optional) {
			p.Legend.Add(s.name+": not exported", noLine{})
			continue
		}
		xys := make(plotter.XYs, len(pr.Timeline))
		for k, pt := range pr.Timeline {
			xys[k] = plotter.XY{X: pt.T, Y: s.value(pt)}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			continue
		}
		l.Color = s.color
		l.Width = vg.Points(1.2)
		p.Add(l)
		if len(row.series) > 1 {
			p.Legend.Add(s.name, l)
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.XOffs = vg.Points(8)
	return p
}

// bands shades every other phase and, on the top row, names each.
type bands struct {
	spans []phaseTime
	label bool
}

func (b bands) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	sty := p.X.Tick.Label
	sty.Font.Size = vg.Points(8)
	for i, s := range b.spans {
		x0, x1 := trX(s.Start), trX(s.End)
		if i%2 == 0 {
			c.FillPolygon(band, []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
		}
		if b.label {
			c.FillText(sty, vg.Point{X: x0 + vg.Points(2), Y: c.Max.Y - vg.Points(10)}, s.Name)
		}
	}
}

// secondsTicks marks the time axis every 1, 2, 5, 10, 20, 30 or 60·n
// seconds, at most 8 marks, labelled in whole seconds: gonum's default
// marked a 28.7s run at "0.00" and "25.00" only.
type secondsTicks struct{}

func (secondsTicks) Ticks(min, max float64) []plot.Tick {
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600} {
		if step = s; (max-min)/s <= 8 {
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ts
}

package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Span is an interval of a run, as offsets from its first send.
type Span struct{ From, To time.Duration }

// RateSeries is a send rate over time: the times messages were accepted, the
// limit they are held to, and pauses to shade.
type RateSeries struct {
	// Sends are the accepted messages' times, sorted.
	Sends []time.Time
	// Limit is the allowed rate, msg/s, drawn as a line.
	Limit float64
	// Bin is the width of the rate's bins.
	Bin time.Duration
	// Pauses are shaded.
	Pauses []Span
}

// Rates returns the rate in each complete bin from the first send, in
// msg/s, as (bin start in seconds, rate) points. The last, partial bin is
// left out: its rate would read low.
func (s RateSeries) Rates() plotter.XYs {
	if len(s.Sends) == 0 || s.Bin <= 0 {
		return nil
	}
	first := s.Sends[0]
	bins := int(s.Sends[len(s.Sends)-1].Sub(first) / s.Bin)
	counts := make([]int, bins)
	for _, t := range s.Sends {
		if i := int(t.Sub(first) / s.Bin); i < bins {
			counts[i]++
		}
	}
	xy := make(plotter.XYs, bins)
	for i, c := range counts {
		xy[i] = plotter.XY{X: (time.Duration(i) * s.Bin).Seconds(), Y: float64(c) / s.Bin.Seconds()}
	}
	return xy
}

// Plot is one figure of the report.
type Plot struct {
	// Scenario is the row the plot belongs to ("4a").
	Scenario string `json:",omitempty"`
	// File is the PNG's file name, inside the plot directory.
	File string
	// Title is drawn on the figure; Caption goes under it in the report.
	Title, Caption string
	// Series is what is drawn.
	Series RateSeries
}

// Group is the scenario group of the plot's row; plots saved before rows
// were recorded are group 4's (the only ones then).
func (p Plot) Group() string {
	if p.Scenario == "" {
		return "4"
	}
	return (&Result{ID: p.Scenario}).Group()
}

// WritePlots draws every plot of the report as a PNG into dir.
func WritePlots(rep *Report, dir string) error {
	if len(rep.Plots) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the plot directory: %w", err)
	}
	for _, p := range rep.Plots {
		if err := p.draw(filepath.Join(dir, p.File)); err != nil {
			return fmt.Errorf("drawing %s: %w", p.File, err)
		}
	}
	return nil
}

var (
	rateColor  = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	limitColor = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	pauseColor = color.NRGBA{R: 255, G: 152, B: 150, A: 120}
	tickColor  = color.NRGBA{R: 60, G: 60, B: 60, A: 255}
)

// tickGlyph draws a short vertical line: one per send, along the bottom of
// a plot with pauses, so that a gap in the sends shows at a glance.
type tickGlyph struct{}

// DrawGlyph draws the tick centred on pt.
func (tickGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.StrokeLine2(draw.LineStyle{Color: sty.Color, Width: vg.Points(0.5)}, pt.X, pt.Y-sty.Radius, pt.X, pt.Y+sty.Radius)
}

func (p Plot) draw(path string) error {
	s := p.Series
	rates := s.Rates()
	if len(rates) == 0 {
		// Too short to bin (a smoke run): one point at the overall rate.
		r := rateOf(s.Sends)
		if math.IsNaN(r) {
			r = 0
		}
		rates = plotter.XYs{{X: 0, Y: r}}
	}
	xmax := rates[len(rates)-1].X + s.Bin.Seconds()
	ymax := s.Limit * 1.6
	for _, xy := range rates {
		ymax = math.Max(ymax, xy.Y*1.1)
	}

	pl := plot.New()
	pl.Title.Text = p.Title
	pl.X.Label.Text = "seconds since the first send"
	pl.Y.Label.Text = fmt.Sprintf("messages/s (%v bins)", s.Bin)
	pl.X.Min, pl.X.Max = 0, xmax
	pl.X.Tick.Marker = secondTicks(xmax)
	pl.Y.Min, pl.Y.Max = 0, ymax
	pl.Add(plotter.NewGrid())
	pl.Legend.Top = true

	for i, sp := range s.Pauses {
		from, to := sp.From.Seconds(), math.Min(sp.To.Seconds(), xmax)
		poly, err := plotter.NewPolygon(plotter.XYs{{X: from, Y: 0}, {X: to, Y: 0}, {X: to, Y: ymax}, {X: from, Y: ymax}})
		if err != nil {
			return err
		}
		poly.Color = pauseColor
		poly.LineStyle.Width = 0
		pl.Add(poly)
		if i == 0 {
			pl.Legend.Add("429 pause (retry_after)", poly)
		}
	}

	line, err := plotter.NewLine(append(rates, plotter.XY{X: xmax, Y: rates[len(rates)-1].Y}))
	if err != nil {
		return err
	}
	line.StepStyle = plotter.PostStep
	line.Color = rateColor
	line.Width = vg.Points(1.5)
	pl.Add(line)
	pl.Legend.Add("sends accepted by the emulator", line)

	limit, err := plotter.NewLine(plotter.XYs{{X: 0, Y: s.Limit}, {X: xmax, Y: s.Limit}})
	if err != nil {
		return err
	}
	limit.Color = limitColor
	limit.Width = vg.Points(1.5)
	limit.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
	pl.Add(limit)
	pl.Legend.Add(fmt.Sprintf("Telegram's limit, %g msg/s", s.Limit), limit)

	if len(s.Pauses) > 0 {
		ticks := make(plotter.XYs, len(s.Sends))
		for i, t := range s.Sends {
			ticks[i] = plotter.XY{X: t.Sub(s.Sends[0]).Seconds(), Y: ymax * 0.03}
		}
		sc, err := plotter.NewScatter(ticks)
		if err != nil {
			return err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: tickColor, Radius: vg.Points(4), Shape: tickGlyph{}}
		pl.Add(sc)
		pl.Legend.Add("each send", sc)
	}
	pl.Legend.ThumbnailWidth = vg.Points(24)
	pl.Legend.Padding = vg.Points(2)
	pl.Legend.YOffs = -vg.Points(2)

	return pl.Save(9*vg.Inch, 4*vg.Inch, path)
}

// secondTicks labels the time axis every 0.5, 1, 2, 5, 10, 20, 30 or 60
// seconds, whichever gives at most a dozen labels up to xmax.
func secondTicks(xmax float64) plot.ConstantTicks {
	step := 60.0
	for _, s := range []float64{0.5, 1, 2, 5, 10, 20, 30} {
		if xmax/s <= 12 {
			step = s
			break
		}
	}
	var ticks plot.ConstantTicks
	for i := 0; float64(i)*step <= xmax; i++ {
		x := float64(i) * step
		ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
	}
	return ticks
}

package main

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var implStyle = map[string]struct {
	c    color.Color
	dash []vg.Length
}{
	"mpich":  {color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, nil},
	"gompi":  {color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, nil},
	"mpichg": {color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, []vg.Length{vg.Points(4), vg.Points(3)}},
}

// plotOSU writes latency, bandwidth, message rate and allreduce time against message
// size, log-log, for every implementation, side by side: an SVG at path and
// a PNG next to it.
func plotOSU(res osuResults, impls []impl, path string) error {
	panel := func(bench, title, ylabel string) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "message size (bytes)"
		p.Y.Label.Text = ylabel
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = byteTicks{}, plot.LogTicks{Prec: -1}
		// Bottom right is empty in all three: small values for large messages
		// never happen.
		p.Legend.Top, p.Legend.Left = false, false
		p.Legend.XOffs, p.Legend.YOffs = -vg.Points(4), vg.Points(4)
		p.Add(plotter.NewGrid())
		for _, im := range impls {
			var xy plotter.XYs
			for _, n := range res.sizes(im.key, bench) {
				if v, ok := res.med(im.key, bench, n); ok && n > 0 && v > 0 {
					xy = append(xy, plotter.XY{X: float64(n), Y: v})
				}
			}
			if len(xy) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, err
			}
			st := implStyle[im.key]
			l.Color, l.Dashes, l.Width = st.c, st.dash, vg.Points(1.5)
			pts.Color, pts.Radius = st.c, vg.Points(2)
			p.Add(l, pts)
			p.Legend.Add(im.label, l, pts)
		}
		return p, nil
	}
	lat, err := panel("latency", "one-way latency, 2 ranks", "µs")
	if err != nil {
		return err
	}
	bw, err := panel("bw", "bandwidth, 2 ranks (window of 64)", "GB/s")
	if err != nil {
		return err
	}
	mr, err := panel("mr", "message rate, 2 ranks (osu_mbw_mr, window of 64)", "million messages/s")
	if err != nil {
		return err
	}
	ar, err := panel("allreduce", "allreduce of float64 sum, 2 ranks", "µs")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	ps := []*plot.Plot{lat, bw, mr, ar}
	return saveGrid(path, [][]*plot.Plot{ps}, 20*vg.Inch, 4.5*vg.Inch, vg.Points(6))
}

// saveGrid draws rows of plots as one figure and writes it to path (SVG)
// and beside it as PNG.
func saveGrid(path string, rows [][]*plot.Plot, w, h, padY vg.Length) error {
	draw2 := func(c draw.Canvas) {
		cs := plot.Align(rows, draw.Tiles{Rows: len(rows), Cols: len(rows[0]), PadX: vg.Points(14), PadY: padY}, c)
		for i, row := range rows {
			for j, p := range row {
				p.Draw(cs[i][j])
			}
		}
	}
	svg := vgsvg.New(w, h)
	draw2(draw.New(svg))
	if err := writeTo(path, svg); err != nil {
		return err
	}
	img := vgimg.New(w, h)
	draw2(draw.New(img))
	png := strings.TrimSuffix(path, filepath.Ext(path)) + ".png"
	if err := writeTo(png, vgimg.PngCanvas{Canvas: img}); err != nil {
		return err
	}
	fmt.Printf("plots: %s, %s\n", path, png)
	return nil
}

func writeTo(path string, c io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// byteTicks marks powers of 4 as 1, 4, ..., 256, 1K, ..., 1M, 4M and every
// other power of 2 with an unlabelled tick.
type byteTicks struct{}

func (byteTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for k := 0; k < 64; k++ {
		v := float64(uint64(1) << k)
		if v < lo {
			continue
		}
		if v > hi {
			break
		}
		t := plot.Tick{Value: v}
		if k%2 == 0 {
			switch {
			case k >= 20:
				t.Label = fmt.Sprintf("%dM", 1<<(k-20))
			case k >= 10:
				t.Label = fmt.Sprintf("%dK", 1<<(k-10))
			default:
				t.Label = fmt.Sprint(1 << k)
			}
		}
		ts = append(ts, t)
	}
	return ts
}

package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var ioColor = map[string]color.Color{
	"dd":            color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	"romio":         color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"gompi":         color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"gompi-cached":  color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"gompi-snap":    color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"gompi-snapcow": color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

var ioLabel = map[string]string{"dd": "dd", "romio": "ROMIO (MPICH)", "gompi": "gompi runtime/mpiio", "gompi-cached": "gompi, node-local cache",
	"gompi-snap": "gompi, cache + snapshot", "gompi-snapcow": "gompi, cache + snapshot, cow.Make buffer"}

// plotIO draws grouped bars of MB/s, one panel per rank count and
// operation (write, read), one group per case, one bar per implementation,
// and a panel of the IOR-hard collective write's blocking time (seconds in
// the write calls: direct, cached, cached with snapshots): an SVG at path
// and a PNG next to it.
func plotIO(res ioResults, cases []ioCase, ranks []int, path string) error {
	var rows [][]*plot.Plot
	for _, np := range ranks {
		var mine []ioCase
		for _, c := range cases {
			if c.np == np {
				mine = append(mine, c)
			}
		}
		var row []*plot.Plot
		for _, op := range []string{"write", "read", "block"} {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("%s, %d ranks", op, np)
			p.Y.Label.Text = "MB/s"
			mine := mine
			if op == "block" {
				p.Title.Text = fmt.Sprintf("hard coll: s in write calls, %d ranks", np)
				p.Y.Label.Text = "s"
				mine = []ioCase{{np, "hard", "coll"}}
			}
			p.Legend.Top = true
			p.Add(plotter.NewGrid())
			names := make([]string, len(mine))
			for i, c := range mine {
				names[i] = c.String()
			}
			w := vg.Points(11)
			for k, im := range ioImpls {
				vals := make(plotter.Values, len(mine))
				any := false
				for i, c := range mine {
					if v, ok := res.med(ioKey{c, im, op}); ok {
						vals[i], any = v, true
					}
				}
				if !any {
					continue
				}
				b, err := plotter.NewBarChart(vals, w)
				if err != nil {
					return err
				}
				b.Color, b.LineStyle.Width = ioColor[im], 0
				b.Offset = w * vg.Length(float64(k)-float64(len(ioImpls)-1)/2)
				p.Add(b)
				p.Legend.Add(ioLabel[im], b)
			}
			p.NominalX(names...)
			p.Y.Min, p.Y.Max = 0, p.Y.Max*1.3 // room for the legend
			row = append(row, p)
		}
		rows = append(rows, row)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return saveGrid(path, rows, 19*vg.Inch, vg.Length(len(rows))*4.5*vg.Inch, vg.Points(14))
}

package main

import (
	"fmt"
	"html"
	"strconv"
	"strings"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
)

// panel is one workload and size of the plot.
type panel struct {
	title string
	cells []cell
	blind float64
}

// series are the plot's lines: the active-active configurations, each starting
// at one replica's figure.
var series = []struct {
	config, label, color string
}{
	{"local", "LocalSyncer (nothing shared)", "#1f77b4"},
	{"local-active", "LocalSyncer + active-request-scorer (control)", "#9467bd"},
	{"peer", "peer-syncer (in-flight load shared)", "#ff7f0e"},
	{"shared-index-default", "shared prefix index, default profile (control)", "#8c564b"},
	{"shared-index", "shared prefix index", "#2ca02c"},
}

const (
	chartW, chartH = 250, 170
	marginL        = 70
	marginT        = 76
	gapX, gapY     = 40, 50
)

// plot draws, per panel (workload and size), the cache hit rate and the TTFT p99
// against the number of replicas, per configuration (medians, with the range
// over the seeds as bars), as an SVG document.
func plot(panels []panel, counts []int) string {
	xs := append([]int{1}, counts...)
	// The legend names the configurations of the run.
	var legend []string
	lx := marginL
	for _, s := range series {
		present := false
		for _, p := range panels {
			for _, c := range p.cells {
				present = present || c.config == s.config
			}
		}
		if !present {
			continue
		}
		legend = append(legend, fmt.Sprintf(`<line x1="%d" y1="38" x2="%d" y2="38" stroke="%s" stroke-width="2"/><text x="%d" y="42">%s</text>`, lx, lx+18, s.color, lx+22, html.EscapeString(s.label)))
		lx += 36 + 6*len(s.label)
	}
	legend = append(legend, fmt.Sprintf(`<line x1="%d" y1="38" x2="%d" y2="38" stroke="#777" stroke-dasharray="4 3"/><text x="%d" y="42">prefix-blind routing</text>`, lx, lx+18, lx+22))
	w := max(marginL+len(panels)*(chartW+gapX), lx+160) // the legend fits
	h := marginT + 2*(chartH+gapY)
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="18" font-size="13" font-weight="bold">Routing quality of active-active EPP replicas against one replica (make bench-routing; medians, bars: range over the seeds)</text>`+"\n", marginL)
	sb.WriteString(strings.Join(legend, "\n") + "\n")
	for row, label := range []string{"cache hit rate", "TTFT p99 (s, simulated)"} {
		y := marginT + row*(chartH+gapY) + chartH/2
		fmt.Fprintf(&sb, `<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle" font-weight="bold">%s</text>`+"\n", y, y, label)
	}
	for i, p := range panels {
		x0 := marginL + i*(chartW+gapX)
		fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+chartW/2, marginT-10, html.EscapeString(p.title))
		hits := func(c cell) stat { return statOf(c.runs, func(r result) float64 { return r.hitRate() }) }
		ttfts := func(c cell) stat {
			return statOf(c.runs, func(r result) float64 { return float64(stats.Percentile(r.ttft, 0.99)) / float64(time.Second) })
		}
		chart(&sb, x0, marginT, p, xs, 0, 1, hits, p.blind, fixed(1))
		top := 0.0
		for _, c := range p.cells {
			if len(c.runs) > 0 {
				top = max(top, ttfts(c).hi)
			}
		}
		ticks := fixed(1)
		if niceCeil(top) < 1 {
			ticks = fixed(2)
		}
		chart(&sb, x0, marginT+chartH+gapY, p, xs, 0, niceCeil(top), ttfts, -1, ticks)
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// chart draws one chart at (x0, y0): y against the replica counts xs.
func chart(sb *strings.Builder, x0, y0 int, p panel, xs []int, lo, hi float64, y func(cell) stat, dashed float64, tick func(float64) string) {
	if hi <= lo {
		hi = lo + 1
	}
	px := func(i int) float64 {
		return float64(x0) + 20 + float64(i)*float64(chartW-40)/float64(max(1, len(xs)-1))
	}
	py := func(v float64) float64 { return float64(y0+chartH) - (v-lo)/(hi-lo)*float64(chartH) }
	fmt.Fprintf(sb, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, chartW, chartH)
	for k := 0; k <= 5; k++ {
		v := lo + (hi-lo)*float64(k)/5
		fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			x0, py(v), x0+chartW, py(v), x0-4, py(v)+4, tick(v))
	}
	for i, x := range xs {
		fmt.Fprintf(sb, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", px(i), y0+chartH+14, x)
	}
	fmt.Fprintf(sb, `<text x="%d" y="%d" text-anchor="middle">replicas</text>`+"\n", x0+chartW/2, y0+chartH+28)
	if dashed >= 0 {
		fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#777" stroke-dasharray="4 3"/>`+"\n", x0, py(dashed), x0+chartW, py(dashed))
	}
	var one *cell
	for i := range p.cells {
		if p.cells[i].config == "single" && len(p.cells[i].runs) > 0 {
			one = &p.cells[i]
		}
	}
	for _, s := range series {
		var pts []string
		var bars []string
		add := func(i int, st stat) {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(i), py(st.med)))
			bars = append(bars, fmt.Sprintf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/><circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`,
				px(i), py(st.lo), px(i), py(st.hi), s.color, px(i), py(st.med), s.color))
		}
		if one != nil {
			add(0, y(*one))
		}
		for _, c := range p.cells {
			if c.config != s.config || len(c.runs) == 0 {
				continue
			}
			for i, x := range xs {
				if x == c.replicas && i > 0 {
					add(i, y(c))
				}
			}
		}
		if len(pts) < 2 {
			continue
		}
		fmt.Fprintf(sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n%s\n", strings.Join(pts, " "), s.color, strings.Join(bars, ""))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for p > v*10 {
		p /= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			f, _ := strconv.ParseFloat(strconv.FormatFloat(m*p, 'g', 6, 64), 64)
			return f
		}
	}
	return v
}

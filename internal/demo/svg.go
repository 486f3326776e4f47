package demo

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/leasehq/lease"
)

// The picture's geometry, in SVG user units (pixels).
const (
	svgWidth    = 820.0
	plotLeft    = 150.0 // the lanes' names are left of it
	plotRight   = 40.0
	laneGap     = 64.0 // between the centres of two workers' lanes
	firstLane   = 96.0 // the centre of the first worker's lane
	barHeight   = 20.0 // a lease
	pauseHeight = 10.0 // a pause, just under its worker's lease
	writeRow    = 36.0 // the two lines under the resource that tell a write
	tickEvery   = 50 * time.Millisecond
)

// Colours: one per worker (in order of first appearance), and the outcomes.
var (
	workerColours = []string{"#3867b5", "#7d4fb8", "#2f8f8f"}
	colAccepted   = "#23883a"
	colRejected   = "#c62828"
	colOverwrote  = "#e06c00" // accepted, with an older token than a write before it
	colExpired    = "#9a9a9a"
	colText       = "#222222"
	colMuted      = "#666666"
)

// WriteSVG draws the record as a picture: each worker's leases as bars on a
// time axis with their tokens, the pauses, the store's expiries, and every
// write with the resource's answer. It draws only what the record holds, and
// the same record always gives the same bytes.
func (r *Record) WriteSVG(w io.Writer) error {
	d := newDrawing(r)
	var b svgBuilder
	b.raw(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.open("svg", "xmlns", "http://www.w3.org/2000/svg", "width", num(svgWidth), "height", num(d.height),
		"viewBox", "0 0 "+num(svgWidth)+" "+num(d.height), "font-family", "Helvetica, Arial, sans-serif",
		"font-size", "12", "role", "img", "aria-labelledby", "title")
	b.elem("title", r.Title(), "id", "title")
	b.open("defs")
	b.open("pattern", "id", "pause", "width", "6", "height", "6", "patternUnits", "userSpaceOnUse", "patternTransform", "rotate(45)")
	b.empty("rect", "width", "6", "height", "6", "fill", "#eeeeee")
	b.empty("line", "x1", "0", "y1", "0", "x2", "0", "y2", "6", "stroke", "#888888", "stroke-width", "2.5")
	b.close("pattern")
	b.open("marker", "id", "arrow", "viewBox", "0 0 10 10", "refX", "9", "refY", "5", "markerWidth", "7", "markerHeight", "7", "orient", "auto-start-reverse")
	b.empty("path", "d", "M0,0 L10,5 L0,10 z", "fill", "context-stroke")
	b.close("marker")
	b.close("defs")
	b.empty("rect", "width", "100%", "height", "100%", "fill", "#ffffff")
	b.elem("text", r.Title(), "x", "16", "y", "26", "font-size", "15", "font-weight", "bold", "fill", colText)

	d.drawAxis(&b)
	d.drawLanes(&b)
	for _, s := range r.Steps {
		d.drawStep(&b, s)
	}
	d.drawFinal(&b)
	b.close("svg")
	if b.err != nil {
		return b.err
	}
	_, err := w.Write(b.buf.Bytes())
	return err
}

// drawing is the layout of one record.
type drawing struct {
	r       *Record
	scale   float64         // pixels per millisecond
	end     time.Duration   // the axis runs from 0 to end
	workers []string        // in order of first appearance
	lane    map[string]int  // worker → index
	resY    float64         // the resource's lane
	writes  int             // write labels drawn so far
	nWrites int             // write labels in all
	axisY   float64         // the time axis
	height  float64         // of the picture
	newest  lease.Token     // highest token written so far, while drawing
	paused  map[string]Step // a worker's pause, until it wakes
}

func newDrawing(r *Record) *drawing {
	d := &drawing{r: r, lane: map[string]int{}, paused: map[string]Step{}}
	for _, s := range r.Steps {
		d.end = max(d.end, s.At, s.Expires)
		if s.Worker != "" {
			if _, ok := d.lane[s.Worker]; !ok {
				d.lane[s.Worker] = len(d.workers)
				d.workers = append(d.workers, s.Worker)
			}
		}
		if s.Kind == Wrote {
			d.nWrites++
		}
	}
	// Round the axis up to a whole tick, with room after the last event.
	d.end = (d.end/tickEvery + 1) * tickEvery
	d.scale = (svgWidth - plotLeft - plotRight) / float64(d.end.Milliseconds())
	d.resY = firstLane + laneGap*float64(len(d.workers)) + 6
	d.axisY = d.resY + 16 + writeRow*float64(d.nWrites)
	d.height = d.axisY + 92
	return d
}

func (d *drawing) x(t time.Duration) float64 {
	return plotLeft + d.scale*float64(t)/float64(time.Millisecond)
}

func (d *drawing) laneY(worker string) float64 { return firstLane + laneGap*float64(d.lane[worker]) }

func (d *drawing) colour(worker string) string {
	return workerColours[d.lane[worker]%len(workerColours)]
}

func ms(t time.Duration) string { return fmt.Sprintf("t=%dms", t.Milliseconds()) }

// drawAxis draws the time axis and a faint grid line at each tick.
func (d *drawing) drawAxis(b *svgBuilder) {
	top := firstLane - 40
	b.open("g", "class", "axis")
	for t := time.Duration(0); t <= d.end; t += tickEvery {
		x := num(d.x(t))
		b.empty("line", "x1", x, "y1", num(top), "x2", x, "y2", num(d.axisY), "stroke", "#e4e4e4")
		b.empty("line", "x1", x, "y1", num(d.axisY), "x2", x, "y2", num(d.axisY+5), "stroke", colText)
		b.elem("text", fmt.Sprintf("%d ms", t.Milliseconds()), "x", x, "y", num(d.axisY+19), "text-anchor", "middle", "fill", colText)
	}
	b.empty("line", "x1", num(plotLeft), "y1", num(d.axisY), "x2", num(d.x(d.end)), "y2", num(d.axisY), "stroke", colText)
	b.elem("text", "time on the store's clock", "x", num(d.x(d.end)), "y", num(d.axisY+36), "text-anchor", "end", "fill", colMuted)
	b.close("g")
}

// drawLanes names each worker's lane and the resource's.
func (d *drawing) drawLanes(b *svgBuilder) {
	for _, w := range d.workers {
		b.elem("text", w, "x", num(plotLeft-12), "y", num(d.laneY(w)+4), "text-anchor", "end", "font-weight", "bold", "fill", d.colour(w))
	}
	name := fmt.Sprintf("resource %q", d.r.Key)
	b.elem("text", name, "x", num(plotLeft-12), "y", num(d.resY+4), "text-anchor", "end", "font-weight", "bold", "fill", colText)
	b.empty("line", "x1", num(plotLeft), "y1", num(d.resY), "x2", num(d.x(d.end)), "y2", num(d.resY), "stroke", colText, "stroke-width", "2")
	guard := "no guard"
	if !d.r.Options.Unfenced {
		guard = fmt.Sprintf("guard: %s", d.r.Options.Mode)
	}
	b.elem("text", guard, "x", num(plotLeft-12), "y", num(d.resY+19), "text-anchor", "end", "font-size", "11", "fill", colMuted)
}

// drawStep draws one step, as a group titled with its timeline line.
func (d *drawing) drawStep(b *svgBuilder, s Step) {
	class := "step " + kindClass(s.Kind)
	if s.Kind == Wrote {
		class += map[bool]string{true: " accepted", false: " rejected"}[s.Accepted]
	}
	b.open("g", "class", class)
	b.elem("title", ms(s.At)+" "+d.r.Describe(s))
	switch s.Kind {
	case Acquired:
		y := d.laneY(s.Worker)
		x0, x1 := d.x(s.At), d.x(s.Expires)
		b.empty("rect", "x", num(x0), "y", num(y-barHeight/2), "width", num(x1-x0), "height", num(barHeight), "rx", "3", "fill", d.colour(s.Worker))
		b.elem("text", fmt.Sprintf("lease, token %d", s.Token), "x", num(x0+6), "y", num(y+4), "fill", "#ffffff", "font-weight", "bold")
		b.elem("text", "expires "+ms(s.Expires), "x", num(x1-4), "y", num(y-barHeight/2-4), "text-anchor", "end", "font-size", "11", "fill", colMuted)
	case Paused:
		d.paused[s.Worker] = s
	case Woke:
		p, ok := d.paused[s.Worker]
		if !ok {
			p = Step{At: s.At}
		}
		delete(d.paused, s.Worker)
		y := d.laneY(s.Worker) + barHeight/2 + 2
		x0, x1 := d.x(p.At), d.x(s.At)
		b.empty("rect", "x", num(x0), "y", num(y), "width", num(x1-x0), "height", num(pauseHeight), "fill", "url(#pause)", "stroke", "#888888")
		b.elem("text", fmt.Sprintf("paused %s to %s (GC, swap, a stalled network)", ms(p.At), ms(s.At)),
			"x", num(x0+2), "y", num(y+pauseHeight+13), "font-size", "11", "fill", colMuted)
		b.empty("circle", "cx", num(x1), "cy", num(y+pauseHeight/2), "r", "4", "fill", d.colour(s.Worker))
		b.elem("text", "wakes, still believing it holds the lease", "x", num(x1+8), "y", num(y+pauseHeight/2-6), "font-size", "11", "fill", colText)
	case Expired:
		x := num(d.x(s.Expires))
		b.empty("line", "x1", x, "y1", num(firstLane-34), "x2", x, "y2", num(d.resY-12), "stroke", colExpired, "stroke-width", "1.5", "stroke-dasharray", "5 4")
		b.elem("text", fmt.Sprintf("store: token %d's lease expired at %s", s.Token, ms(s.Expires)), "x", x, "y", num(firstLane-38), "text-anchor", "middle", "font-size", "11", "fill", colMuted)
	case Wrote:
		d.drawWrite(b, s)
	case ReleaseRefused:
		y := d.laneY(s.Worker) + barHeight/2 + 2 + pauseHeight/2
		b.elem("text", fmt.Sprintf("its release of token %d is refused: not held", s.Token), "x", num(d.x(s.At)+8), "y", num(y+10), "font-size", "11", "fill", colMuted)
	}
	b.close("g")
}

// drawWrite draws an arrow from the writer to the resource, the resource's
// answer on its lane, and below it what happened, left of a leader line:
// the writes come in time order, so a later write's leader (further right)
// never crosses an earlier write's words.
func (d *drawing) drawWrite(b *svgBuilder, s Step) {
	x := d.x(s.At)
	from := d.laneY(s.Worker) + barHeight/2 + 2 + pauseHeight
	colour, mark, verdict := colAccepted, "✓", "accepted"
	switch {
	case !s.Accepted:
		colour, mark = colRejected, "✗"
		verdict = fmt.Sprintf("REJECTED: the highest token accepted is %d", s.Highest)
	case s.Token < d.newest:
		colour = colOverwrote
		verdict = fmt.Sprintf("accepted, overwriting token %d's write", d.newest)
	}
	if s.Accepted {
		d.newest = max(d.newest, s.Token)
	}
	b.empty("line", "x1", num(x), "y1", num(from), "x2", num(x), "y2", num(d.resY-10), "stroke", colour, "stroke-width", "2", "marker-end", "url(#arrow)")
	b.empty("circle", "cx", num(x), "cy", num(d.resY), "r", "8", "fill", colour)
	b.elem("text", mark, "x", num(x), "y", num(d.resY+4), "text-anchor", "middle", "fill", "#ffffff", "font-weight", "bold", "font-size", "11")
	ly := d.resY + 30 + writeRow*float64(d.writes)
	d.writes++
	b.empty("line", "x1", num(x), "y1", num(d.resY+8), "x2", num(x), "y2", num(ly+18), "stroke", colour, "stroke-dasharray", "2 2")
	b.elem("text", fmt.Sprintf("%s %s writes %q with token %d", ms(s.At), s.Worker, s.Value, s.Token),
		"x", num(x-6), "y", num(ly), "text-anchor", "end", "fill", colText)
	b.elem("text", verdict, "x", num(x-6), "y", num(ly+15), "text-anchor", "end", "font-weight", "bold", "fill", colour)
}

// drawFinal states the resource's final value under the axis.
func (d *drawing) drawFinal(b *svgBuilder) {
	colour := colAccepted
	if d.r.Options.Unfenced {
		colour = colRejected
	}
	y := d.axisY + 58
	b.open("g", "class", "final")
	b.elem("text", fmt.Sprintf("final state: %q, written with token %d", d.r.Final.Value, d.r.Final.LastToken),
		"x", "16", "y", num(y), "font-weight", "bold", "fill", colour)
	b.elem("text", d.r.Conclusion(), "x", "16", "y", num(y+17), "fill", colour)
	b.close("g")
}

func kindClass(k Kind) string {
	switch k {
	case Acquired:
		return "acquired"
	case Paused:
		return "paused"
	case Expired:
		return "expired"
	case Woke:
		return "woke"
	case Wrote:
		return "wrote"
	case ReleaseRefused:
		return "release-refused"
	}
	return "kind-" + strconv.Itoa(int(k))
}

// num formats a coordinate with at most one decimal, the same on every
// machine.
func num(f float64) string {
	s := strconv.FormatFloat(f, 'f', 1, 64)
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		s = s[:len(s)-2]
	}
	return s
}

// svgBuilder writes indented XML, escaping every attribute and text.
type svgBuilder struct {
	buf   bytes.Buffer
	depth int
	stack []string
	err   error
}

func (b *svgBuilder) raw(s string) { b.buf.WriteString(s) }

func (b *svgBuilder) start(name string, attrs []string) {
	if len(attrs)%2 != 0 && b.err == nil {
		b.err = fmt.Errorf("demo: svg: <%s> has an attribute without a value", name)
	}
	for range b.depth {
		b.buf.WriteString("  ")
	}
	b.buf.WriteString("<" + name)
	for i := 0; i+1 < len(attrs); i += 2 {
		b.buf.WriteString(" " + attrs[i] + `="`)
		b.escape(attrs[i+1])
		b.buf.WriteString(`"`)
	}
}

func (b *svgBuilder) escape(s string) {
	if err := xml.EscapeText(&b.buf, []byte(s)); err != nil && b.err == nil {
		b.err = err
	}
}

// open starts an element that has children.
func (b *svgBuilder) open(name string, attrs ...string) {
	b.start(name, attrs)
	b.buf.WriteString(">\n")
	b.depth++
	b.stack = append(b.stack, name)
}

// close ends the element opened last, which must be name.
func (b *svgBuilder) close(name string) {
	if n := len(b.stack); n == 0 || b.stack[n-1] != name {
		if b.err == nil {
			b.err = fmt.Errorf("demo: svg: </%s> closes %v", name, b.stack)
		}
		return
	}
	b.stack = slices.Delete(b.stack, len(b.stack)-1, len(b.stack))
	b.depth--
	for range b.depth {
		b.buf.WriteString("  ")
	}
	b.buf.WriteString("</" + name + ">\n")
}

// empty writes an element without children.
func (b *svgBuilder) empty(name string, attrs ...string) {
	b.start(name, attrs)
	b.buf.WriteString("/>\n")
}

// elem writes an element holding text.
func (b *svgBuilder) elem(name, text string, attrs ...string) {
	b.start(name, attrs)
	b.buf.WriteString(">")
	b.escape(text)
	b.buf.WriteString("</" + name + ">\n")
}

package demo_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/cli"
	"github.com/leasehq/lease/internal/demo"
)

// docsPicture is the fenced picture README.md shows.
var docsPicture = filepath.Join("..", "..", "docs", "img", "demo.svg")

// The picture in the docs is the one the demo draws now: it cannot go stale.
func TestDocsPictureIsCurrent(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"demo", "--svg", "-"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("lease demo --svg -: exit %d, stderr %q", code, stderr.String())
	}
	if *update {
		if err := os.WriteFile(docsPicture, stdout.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(docsPicture)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/demo -update to create it)", err)
	}
	if !bytes.Equal(stdout.Bytes(), want) {
		t.Errorf("%s is not what lease demo --svg draws now: run go test ./internal/demo -update", docsPicture)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("](docs/img/demo.svg)")) {
		t.Error("README.md does not show docs/img/demo.svg")
	}
}

// svgDoc is what the tests read back from a picture.
type svgDoc struct {
	root  xml.StartElement
	steps []svgStep // the <g class="step …"> groups, in order
}

type svgStep struct {
	class   string
	title   string
	circles []float64 // the cx of each circle in the group
	texts   []string
}

// parseSVG reads a picture strictly as XML, failing on anything that is not
// well-formed, and collects its step groups.
func parseSVG(t *testing.T, pic []byte) svgDoc {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(pic))
	dec.Strict = true
	var doc svgDoc
	var cur *svgStep
	var path []string
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the picture is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(path) == 0 {
				doc.root = tok.Copy()
			}
			path = append(path, tok.Name.Local)
			text.Reset()
			attr := func(name string) string {
				for _, a := range tok.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			switch {
			case tok.Name.Local == "g" && strings.HasPrefix(attr("class"), "step "):
				doc.steps = append(doc.steps, svgStep{class: attr("class")})
				cur = &doc.steps[len(doc.steps)-1]
			case tok.Name.Local == "circle" && cur != nil:
				cx, err := strconv.ParseFloat(attr("cx"), 64)
				if err != nil {
					t.Fatalf("circle cx %q: %v", attr("cx"), err)
				}
				cur.circles = append(cur.circles, cx)
			}
		case xml.CharData:
			text.Write(tok)
		case xml.EndElement:
			name := path[len(path)-1]
			path = path[:len(path)-1]
			switch {
			case name == "g" && cur != nil:
				cur = nil
			case name == "title" && cur != nil:
				cur.title = text.String()
			case name == "text" && cur != nil:
				cur.texts = append(cur.texts, text.String())
			}
		}
	}
	if len(path) != 0 {
		t.Fatalf("the picture ends inside %v", path)
	}
	return doc
}

func draw(t *testing.T, rec *demo.Record) []byte {
	t.Helper()
	var pic bytes.Buffer
	if err := rec.WriteSVG(&pic); err != nil {
		t.Fatal(err)
	}
	return pic.Bytes()
}

func play(t *testing.T, opts demo.Options) *demo.Record {
	t.Helper()
	rec, err := demo.Play(opts)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// Every variant draws well-formed SVG with one titled group per recorded
// step, each titled with its timeline line, and the writes marked with the
// outcome the guard gave.
func TestSVGDrawsTheRecord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     demo.Options
		outcomes string // of the writes, in order
	}{
		{"fenced", demo.Options{}, "accepted rejected"},
		{"strict", demo.Options{Mode: fence.Strict}, "accepted rejected"},
		{"unfenced", demo.Options{Unfenced: true}, "accepted accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := play(t, tc.opts)
			doc := parseSVG(t, draw(t, rec))
			if doc.root.Name.Local != "svg" || doc.root.Name.Space != "http://www.w3.org/2000/svg" {
				t.Errorf("root element %v, want svg in the SVG namespace", doc.root.Name)
			}
			if len(doc.steps) != len(rec.Steps) {
				t.Fatalf("%d step groups for %d steps", len(doc.steps), len(rec.Steps))
			}
			var outcomes []string
			for i, s := range rec.Steps {
				want := "t=" + strconv.FormatInt(s.At.Milliseconds(), 10) + "ms " + rec.Describe(s)
				if doc.steps[i].title != want {
					t.Errorf("step %d's title %q, want %q", i, doc.steps[i].title, want)
				}
				if s.Kind == demo.Wrote {
					f := strings.Fields(doc.steps[i].class)
					outcomes = append(outcomes, f[len(f)-1])
				}
			}
			if got := strings.Join(outcomes, " "); got != tc.outcomes {
				t.Errorf("writes drawn as %q, want %q", got, tc.outcomes)
			}
		})
	}
}

// The picture follows the record, not constants: a write moved later, with
// another token, is drawn further right and named with its token.
func TestSVGFollowsTheRecord(t *testing.T) {
	rec := play(t, demo.Options{})
	first := -1
	for i, s := range rec.Steps {
		if s.Kind == demo.Wrote {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatal("the record has no write")
	}
	before := parseSVG(t, draw(t, rec)).steps[first]

	moved := *rec
	moved.Steps = append([]demo.Step(nil), rec.Steps...)
	moved.Steps[first].At += 60 * time.Millisecond
	moved.Steps[first].Token = 7
	after := parseSVG(t, draw(t, &moved)).steps[first]

	if len(before.circles) != 1 || len(after.circles) != 1 {
		t.Fatalf("write markers: %v before, %v after; want one each", before.circles, after.circles)
	}
	if after.circles[0] <= before.circles[0] {
		t.Errorf("the write moved 60 ms later but its marker went from x=%v to x=%v", before.circles[0], after.circles[0])
	}
	if !strings.Contains(strings.Join(after.texts, "\n"), "with token 7") {
		t.Errorf("the write with token 7 is drawn as %q", after.texts)
	}
}

// The same run draws the same bytes.
func TestSVGIsDeterministic(t *testing.T) {
	a, b := draw(t, play(t, demo.Options{})), draw(t, play(t, demo.Options{}))
	if !bytes.Equal(a, b) {
		t.Error("two runs of the demo drew different pictures")
	}
}

// --svg FILE writes the picture to FILE and still prints the timeline.
func TestDemoSVGFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.svg")
	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"demo", "--unfenced", "--svg", path}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	var timeline bytes.Buffer
	if err := play(t, demo.Options{Unfenced: true}).WriteTimeline(&timeline); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != timeline.String() {
		t.Errorf("stdout is not the timeline:\n%s", stdout.String())
	}
	pic, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := draw(t, play(t, demo.Options{Unfenced: true})); !bytes.Equal(pic, want) {
		t.Error("the file is not the unfenced picture")
	}

	for _, args := range [][]string{
		{"demo", "--svg="},
		{"demo", "--svg", filepath.Join(t.TempDir(), "missing", "demo.svg")},
	} {
		stdout.Reset()
		stderr.Reset()
		if code := cli.Main(args, nil, &stdout, &stderr); code == 0 {
			t.Errorf("lease %q: exit 0", args)
		}
		if lines := bytes.Count(stderr.Bytes(), []byte("\n")); lines != 1 {
			t.Errorf("lease %q: error output is %d lines, want one: %q", args, lines, stderr.String())
		}
	}
}

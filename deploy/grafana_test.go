package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"
)

const dashboardFile = "grafana/lease.json"

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Time struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	GridPos    gridPos     `json:"gridPos"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
}

type gridPos struct{ H, W, X, Y int }

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *datasource     `json:"datasource"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dec.More() {
		t.Fatalf("%s: more than one JSON value", dashboardFile)
	}
	return d
}

var (
	uidPattern  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,40}$`)
	varPattern  = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)`)
	builtinVars = map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
)

// The dashboard is one Grafana can import: a uid, a schema version, panels
// on the 24-column grid without overlap, each querying the data source
// variable, and only variables it defines.
func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || !uidPattern.MatchString(d.UID) {
		t.Errorf("title %q, uid %q: want a title and a uid of 1-40 letters, digits, - or _", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want 36 or later (Grafana 9+, data sources by uid)", d.SchemaVersion)
	}
	if d.Time.From == "" || d.Time.To == "" {
		t.Error("no default time range")
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if ds, ok := vars["datasource"]; !ok || ds.Type != "datasource" || string(ds.Query) != `"prometheus"` {
		t.Errorf("want a variable datasource of type datasource over prometheus, got %+v", ds)
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}" || v.Definition == "") {
			t.Errorf("variable %s: want a definition queried from ${datasource}", v.Name)
		}
	}
	checkVars := func(where, s string) {
		for _, m := range varPattern.FindAllStringSubmatch(s, -1) {
			if _, ok := vars[m[1]]; !ok && !builtinVars[m[1]] {
				t.Errorf("%s uses $%s, which the dashboard does not define", where, m[1])
			}
		}
	}

	ids := map[int]bool{}
	var boxes []panel
	for _, p := range d.Panels {
		if p.ID <= 0 || ids[p.ID] {
			t.Errorf("panel %q: id %d is not positive or not unique", p.Title, p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if p.Title == "" || g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %d %q: gridPos %+v off the 24-column grid, or no title", p.ID, p.Title, g)
		}
		for _, o := range boxes {
			h := o.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %q and %q overlap", o.Title, p.Title)
			}
		}
		boxes = append(boxes, p)
		switch p.Type {
		case "row":
			continue
		case "stat", "timeseries":
		default:
			t.Errorf("panel %q: type %q, want row, stat or timeseries", p.Title, p.Type)
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: target %q without expr, or refId not unique", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			checkVars("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		checkVars("variable "+v.Name, v.Definition)
	}
}

package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/fencemetrics"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// exported is what scrapes showed: series name → label name → the values
// seen.
type exported map[string]map[string]map[string]bool

var (
	seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? `)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// addScrape reads a Prometheus text exposition into e.
func (e exported) addScrape(t *testing.T, text string) {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := seriesLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not a series line: %q", line)
		}
		labels := e[m[1]]
		if labels == nil {
			labels = map[string]map[string]bool{}
			e[m[1]] = labels
		}
		for _, p := range labelPair.FindAllStringSubmatch(m[3], -1) {
			if labels[p[1]] == nil {
				labels[p[1]] = map[string]bool{}
			}
			labels[p[1]][p[2]] = true
		}
	}
}

// Target labels Prometheus adds to every series it scrapes.
var targetLabels = map[string]bool{"job": true, "instance": true}

var (
	// A selector of one of our metrics: a lease_ or fence_ name and its
	// matchers, if any.
	selector = regexp.MustCompile(`\b((?:lease|fence)_[a-zA-Z0-9_:]*)\s*(\{[^}]*\})?`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	literals = regexp.MustCompile(`^[a-zA-Z0-9_ /{}.-]+(\|[a-zA-Z0-9_ /{}.-]+)*$`)
)

// checkExpr returns what expr uses that e does not have: metric names, label
// names, and label values matched with = or with =~ on an alternation of
// literals. Values holding a Grafana variable ($…) are not checked.
func (e exported) checkExpr(expr string) []string {
	var problems []string
	found := selector.FindAllStringSubmatch(expr, -1)
	if len(found) == 0 {
		return nil
	}
	for _, sel := range found {
		name := sel[1]
		labels, ok := e[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %s is not exported", name))
			continue
		}
		for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
			label, op, value := m[1], m[2], m[3]
			if targetLabels[label] {
				continue
			}
			values, ok := labels[label]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s has no label %s", name, label))
				continue
			}
			if strings.Contains(value, "$") {
				continue
			}
			var want []string
			switch {
			case op == "=":
				want = []string{value}
			case op == "=~" && literals.MatchString(value):
				want = strings.Split(value, "|")
			}
			for _, v := range want {
				if !values[v] {
					problems = append(problems, fmt.Sprintf("%s{%s=%q}: no such series (values seen: %v)", name, label, v, sortedKeys(values)))
				}
			}
		}
	}
	return problems
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// scrapeKit returns what a real lease serve exports after some traffic,
// with what fence/fencemetrics exports after a rejected late write.
func scrapeKit(t *testing.T) exported {
	t.Helper()
	_, addr := startServe(t, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()+"/data")
	base := "http://" + addr
	post := func(path string, body any, want int) map[string]any {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %d %v, want %d", path, resp.StatusCode, out, want)
		}
		return out
	}
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	l := post("/v1/leases/job/acquire", map[string]any{"owner": "a", "ttl_ms": 60000}, http.StatusOK)
	post("/v1/leases/job/acquire", map[string]any{"owner": "b", "ttl_ms": 60000}, http.StatusConflict)
	post("/v1/leases/job/renew", map[string]any{"id": l["id"], "token": l["token"], "ttl_ms": 60000}, http.StatusOK)
	post("/v1/leases/job/release", map[string]any{"id": l["id"], "token": l["token"]}, http.StatusOK)
	post("/v1/leases/job/release", map[string]any{"id": l["id"], "token": l["token"]}, http.StatusConflict)
	get("/v1/leases/job")
	get("/v1/leases?prefix=")
	get("/readyz")

	// A holder that stops renewing: the server counts its lease expired,
	// which is what LeaseHolderStoppedRenewing alerts on, and its late
	// renewal is refused.
	stale := post("/v1/leases/stale/acquire", map[string]any{"owner": "c", "ttl_ms": 10}, http.StatusOK)
	expired := regexp.MustCompile(`(?m)^lease_expirations_total 1$`)
	poll.Until(t, 10*time.Second, func() error {
		if m := get("/metrics"); !expired.MatchString(m) {
			return fmt.Errorf("lease_expirations_total not 1 after a lease was left to expire:\n%s", m)
		}
		return nil
	})
	post("/v1/leases/stale/renew", map[string]any{"id": stale["id"], "token": stale["token"], "ttl_ms": 60000}, http.StatusConflict)

	e := exported{}
	e.addScrape(t, get("/metrics"))

	// A program's guard, counted, after a late write.
	reg := prometheus.NewRegistry()
	c, err := fencemetrics.New("orders-db")
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(c)
	g := c.Guard(fence.NewMemory(fence.AtLeast))
	_ = g.Check(t.Context(), "order/1", 2, func() error { return nil })
	_ = g.Check(t.Context(), "order/1", 1, func() error { return nil })
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	e.addScrape(t, rec.Body.String())
	return e
}

// grafanaExprs returns the PromQL of the dashboard: its panels' targets and
// its variables' queries, each named by where it is.
func grafanaExprs(t *testing.T) map[string]string {
	t.Helper()
	d := loadDashboard(t)
	out := map[string]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			out[fmt.Sprintf("variable %s", v.Name)] = v.Definition
		}
	}
	return out
}

// Every metric, label and value the alert rules and the dashboard use is one
// that lease serve or fence/fencemetrics exports, so that the kit cannot
// drift from the code.
func TestKitUsesExportedMetrics(t *testing.T) {
	e := scrapeKit(t)
	_, rules := loadRules(t)
	exprs := grafanaExprs(t)
	for _, r := range rules {
		exprs["alert "+r.alert] = r.expr
	}
	used := map[string]bool{}
	for where, expr := range exprs {
		for _, p := range e.checkExpr(expr) {
			t.Errorf("%s: %s", where, p)
		}
		for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
			used[sel[1]] = true
		}
	}
	// SERVE.md's metrics table names every metric the server exports, and
	// fencemetrics' too.
	doc, err := os.ReadFile("../docs/SERVE.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range e {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if (strings.HasPrefix(base, "lease_") || strings.HasPrefix(base, "fence_")) && !bytes.Contains(doc, []byte("`"+base+"`")) {
			t.Errorf("docs/SERVE.md does not name %s", base)
		}
	}
	// The kit covers what an operator needs: each of these is used.
	for _, name := range []string{"lease_expirations_total", "lease_acquisitions_total", "lease_renewals_total",
		"lease_releases_total", "fence_writes_total", "lease_active_leases", "lease_http_request_duration_seconds_bucket"} {
		if !used[name] {
			t.Errorf("the kit does not use %s", name)
		}
	}
}

// The check above catches a metric, a label or a value that no server
// exports.
func TestMetricCheckCatchesDrift(t *testing.T) {
	e := exported{}
	e.addScrape(t, "# HELP lease_acquisitions_total x\nlease_acquisitions_total{result=\"acquired\"} 1\nlease_acquisitions_total{result=\"error\"} 0\n")
	for _, tc := range []struct {
		expr string
		bad  bool
	}{
		{`rate(lease_acquisitions_total{result="error", instance=~"$instance"}[5m])`, false},
		{`sum(lease_acquisitions_total{result=~"acquired|error"})`, false},
		{`up{job="lease"} == 0`, false},
		{`rate(lease_acquisition_total[5m])`, true},
		{`lease_acquisitions_total{result="failed"}`, true},
		{`lease_acquisitions_total{outcome="error"}`, true},
		{`lease_acquisitions_total{result=~"acquired|refused"}`, true},
	} {
		if got := e.checkExpr(tc.expr); (len(got) > 0) != tc.bad {
			t.Errorf("checkExpr(%s) = %q, want a problem: %v", tc.expr, got, tc.bad)
		}
	}
}

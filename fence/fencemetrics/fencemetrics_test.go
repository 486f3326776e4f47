package fencemetrics_test

import (
	"context"
	"errors"
	"go/build"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/fencemetrics"
	"github.com/leasehq/lease/fence/guardtest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counts gathers reg and returns fence_writes_total by guard and result.
func counts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != fencemetrics.MetricName {
			continue
		}
		if f.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s is a %v, want a counter", f.GetName(), f.GetType())
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["guard"]+"/"+labels["result"]] = m.GetCounter().GetValue()
		}
	}
	return got
}

func newCounter(t *testing.T, reg prometheus.Registerer, name string) *fencemetrics.Counter {
	t.Helper()
	c, err := fencemetrics.New(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	return c
}

// A wrapped guard is counted by what it answered, each series there from
// the start, and two guards share a registry under their own names.
func TestGuardCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	orders := newCounter(t, reg, "orders")
	newCounter(t, reg, "jobs")
	want := map[string]float64{
		"orders/accepted": 0, "orders/rejected": 0, "orders/error": 0,
		"jobs/accepted": 0, "jobs/rejected": 0, "jobs/error": 0,
	}
	check := func(what string) {
		t.Helper()
		got := counts(t, reg)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v (all: %v)", what, k, got[k], v, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: series %v, want %v", what, got, want)
		}
	}
	check("before any write")

	g := orders.Guard(fence.NewMemory(fence.AtLeast))
	ctx := context.Background()
	ok := func() error { return nil }
	if err := g.Check(ctx, "r", 2, ok); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, "r", 2, ok); err != nil {
		t.Fatal(err)
	}
	want["orders/accepted"] = 2
	check("two accepted writes")

	err := g.Check(ctx, "r", 1, ok)
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Highest != 2 {
		t.Fatalf("late write: %v, want a *fence.StaleTokenError with highest 2", err)
	}
	want["orders/rejected"] = 1
	check("a late write")

	boom := errors.New("disk full")
	if err := g.Check(ctx, "r", 3, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed write: %v, want %v", err, boom)
	}
	if err := g.Check(ctx, "r", 0, ok); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("token 0: %v, want ErrInvalid", err)
	}
	want["orders/error"] = 2
	check("a failed write and a bad token")
}

// Observe counts any guard's answer, whatever its signature, and passes the
// error through.
func TestObserve(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCounter(t, reg, "redis")
	stale := &fence.StaleTokenError{Resource: "r", Token: 1, Highest: 2}
	wrapped := errors.Join(errors.New("redisfence: set"), stale)
	if err := c.Observe(wrapped); err != wrapped {
		t.Errorf("Observe returned %v, want its argument", err)
	}
	if err := c.Observe(nil); err != nil {
		t.Errorf("Observe(nil) = %v", err)
	}
	c.Observe(lease.ErrUnavailable)
	got := counts(t, reg)
	if got["redis/accepted"] != 1 || got["redis/rejected"] != 1 || got["redis/error"] != 1 {
		t.Errorf("counts %v, want one of each", got)
	}
}

// fence.Middleware over a counted guard: the late write is answered 409 and
// counted as rejected.
func TestMiddlewareRejectionCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCounter(t, reg, "http")
	mw, err := fence.Middleware(c.Guard(fence.NewMemory(fence.AtLeast)),
		func(r *http.Request) (string, error) { return r.URL.Path, nil })
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()
	put := func(token string) int {
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/doc", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Fencing-Token", token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put("2"); code != http.StatusOK {
		t.Fatalf("write with token 2: %d", code)
	}
	if code := put("1"); code != http.StatusConflict {
		t.Fatalf("late write with token 1: %d, want 409", code)
	}
	if got := counts(t, reg); got["http/accepted"] != 1 || got["http/rejected"] != 1 {
		t.Errorf("counts %v, want one accepted and one rejected", got)
	}
}

// A counted guard is still a guard: the conformance suite passes through it.
func TestConformance(t *testing.T) {
	guardtest.TestGuard(t, func(t *testing.T, mode fence.Mode) fence.Guard {
		c, err := fencemetrics.New("conformance")
		if err != nil {
			t.Fatal(err)
		}
		return c.Guard(fence.NewMemory(mode))
	})
}

func TestNewValidates(t *testing.T) {
	for _, name := range []string{"", "\xff", strings.Repeat("g", 129)} {
		if _, err := fencemetrics.New(name); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("New(%q): %v, want ErrInvalid", name, err)
		}
	}
}

// fence and the guards beside it do not pull in Prometheus: only importing
// fencemetrics does.
func TestFenceDoesNotImportPrometheus(t *testing.T) {
	const module = "github.com/leasehq/lease"
	seen := map[string]bool{}
	var walk func(path, from string)
	walk = func(path, from string) {
		if seen[path] {
			return
		}
		seen[path] = true
		if strings.HasPrefix(path, "github.com/prometheus/") {
			t.Errorf("%s imports %s", from, path)
			return
		}
		if path != module && !strings.HasPrefix(path, module+"/") {
			return
		}
		pkg, err := build.Import(path, ".", 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			walk(imp, path)
		}
	}
	for _, p := range []string{"fence", "fence/pgfence", "fence/sqlfence", "fence/redisfence"} {
		walk(module+"/"+p, "")
	}
	if !seen[module+"/fence"] || len(seen) < 5 {
		t.Fatalf("walked only %v", seen)
	}
}

// TestGuardOfNil: a counted nil guard refuses every Check as invalid and
// counts it as an error, and fence.Middleware over it answers 400. Before,
// Check dereferenced the nil guard and panicked in the caller's request.
func TestGuardOfNil(t *testing.T) {
	c, err := fencemetrics.New("nil")
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	err = c.Guard(nil).Check(context.Background(), "r", 1, func() error { ran = true; return nil })
	if !errors.Is(err, lease.ErrInvalid) || ran {
		t.Fatalf("Check on a counted nil guard: err = %v, write ran: %v; want ErrInvalid and no write", err, ran)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if got := counts(t, reg); got["nil/error"] != 1 || got["nil/accepted"] != 0 {
		t.Errorf("counts %v, want one error", got)
	}
}

package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

// TestRunMinTTLIsTheClients: the minimum lease run states is the one its
// Client enforces — it takes a lease of minRunTTL and refuses one a
// millisecond shorter — so the number in the help cannot drift from the
// Client's rule.
func TestRunMinTTLIsTheClients(t *testing.T) {
	if minRunTTL%time.Millisecond != 0 || minRunTTL < lease.MinTTL {
		t.Fatalf("minRunTTL = %v, want whole milliseconds, at least %v", minRunTTL, lease.MinTTL)
	}
	c, err := newRunClient(memtest.New(t), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.TryAcquire(t.Context(), "job", minRunTTL)
	if err != nil {
		t.Fatalf("the Client refuses lease run's minimum %v: %v", minRunTTL, err)
	}
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(t.Context(), "job", minRunTTL-time.Millisecond); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("TryAcquire(%v) = %v; want ErrInvalid: minRunTTL is not the smallest", minRunTTL-time.Millisecond, err)
	}
}

// TestRunRefusesTTLBelowItsMinimum: a --ttl lease run cannot use is a usage
// error naming the minimum, before any server is dialled; the minimum
// itself runs, and run --help states it.
func TestRunRefusesTTLBelowItsMinimum(t *testing.T) {
	b := memtest.New(t)
	childEnviron(t, "env", "", 0)
	for _, ttl := range []time.Duration{lease.MinTTL, minRunTTL - time.Millisecond} {
		r := cli(t, b, nil, nil, runArgs(t, "job", "--ttl", ttl.String())...)
		if r.code != ExitUsage || r.stdout != "" {
			t.Errorf("--ttl %v: exit %d stdout %q, want %d and no command", ttl, r.code, r.stdout, ExitUsage)
		}
		oneErrorLine(t, r, "--ttl", "minimum is "+minRunTTL.String())
		if r.url != "" {
			t.Errorf("--ttl %v: dialled %q despite the usage error", ttl, r.url)
		}
	}
	// The minimum runs: on a frozen clock shared by the store and lease
	// run's Client, so that a machine too busy to renew every 16ms cannot
	// turn "it runs" into a loss.
	clk := fakeclock.New(time.Now())
	r := cliOnClock(t, memtest.New(t, memstore.WithClock(clk)), clk, nil, nil, runArgs(t, "job", "--ttl", minRunTTL.String())...)
	if r.code != ExitOK || !strings.HasPrefix(r.stdout, "key=job ") {
		t.Errorf("--ttl %v: exit %d stdout %q stderr %q", minRunTTL, r.code, r.stdout, r.stderr)
	}
	help := cli(t, b, nil, nil, "run", "--help").stdout
	if !strings.Contains(help, "--ttl is at least "+minRunTTL.String()) {
		t.Errorf("run --help does not state the minimum TTL %v:\n%s", minRunTTL, help)
	}
}

// TestRunRefusesGraceLongerThanTTL: a CMD that ignores SIGTERM works for
// --grace after the loss, past the lease's expiry; a --grace longer than the
// TTL is refused unless --allow-grace-past-ttl says it is meant. Without
// --grace, the default (10s) is cut to a shorter TTL rather than refused.
func TestRunRefusesGraceLongerThanTTL(t *testing.T) {
	b := memtest.New(t)
	childEnviron(t, "env", "", 0)
	r := cli(t, b, nil, nil, runArgs(t, "job", "--ttl", "1s", "--grace", "2s")...)
	if r.code != ExitUsage || r.stdout != "" {
		t.Fatalf("--grace 2s --ttl 1s: exit %d stdout %q, want %d and no command", r.code, r.stdout, ExitUsage)
	}
	oneErrorLine(t, r, "--grace 2s", "--ttl 1s", "--allow-grace-past-ttl")
	for _, args := range [][]string{
		{"--ttl", "1s", "--grace", "2s", "--allow-grace-past-ttl"},
		{"--ttl", "1s", "--grace", "1s"},
		{"--ttl", "1s"},
	} {
		r := cli(t, b, nil, nil, runArgs(t, append([]string{"job"}, args...)...)...)
		if r.code != ExitOK || !strings.HasPrefix(r.stdout, "key=job ") {
			t.Errorf("%v: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}

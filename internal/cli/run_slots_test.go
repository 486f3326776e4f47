package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

// readyLines waits until path has n lines starting with "ready" and
// returns them.
func readyLines(t *testing.T, path string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		var ready []string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "ready ") {
				ready = append(ready, line)
			}
		}
		if len(ready) >= n {
			return ready
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d ready lines of %d: %q", path, len(ready), n, data)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunSlots: N commands run at once under a semaphore of N slots, each
// with its own slot's key, token and number; the next is refused (75) or
// waits for a slot; the slots are released as the commands end.
func TestRunSlots(t *testing.T) {
	for _, be := range localBackends {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			file := filepath.Join(t.TempDir(), "child")
			childEnviron(t, "slot", file, 0)
			done := make(chan result, 3)
			for range 2 {
				go func() { done <- cli(t, b, nil, nil, runArgs(t, "render", "--slots", "2")...) }()
			}
			ready := readyLines(t, file, 2)
			var slots []string
			for _, line := range ready {
				f := strings.Fields(line) // ready KEY TOKEN SLOT
				l, err := b.Get(t.Context(), f[1])
				if err != nil || itoa(l.Token) != f[2] || f[1] != "render/slots/"+f[3] {
					t.Errorf("a command saw %q; the backend has %+v, %v", line, l, err)
				}
				slots = append(slots, f[3])
			}
			slices.Sort(slots)
			if !slices.Equal(slots, []string{"0", "1"}) {
				t.Errorf("slots %v, want 0 and 1", slots)
			}

			r := cli(t, b, nil, nil, runArgs(t, "render", "--slots", "2")...)
			if r.code != ExitTempFail {
				t.Errorf("a third command: exit %d, want %d", r.code, ExitTempFail)
			}
			oneErrorLine(t, r, "all 2 slots", `"render"`)
			if got := readyLines(t, file, 2); len(got) != 2 {
				t.Errorf("the third command ran: %q", got)
			}

			// A third that waits gets the first slot freed.
			go func() { done <- cli(t, b, nil, nil, runArgs(t, "render", "--slots", "2", "--wait", "20s")...) }()
			waitUntil(t, "the third command in line", func() bool {
				_, err := b.Get(t.Context(), "render/queue")
				return err == nil
			})
			if err := os.WriteFile(file+".go", nil, 0o600); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if r := ended(t, done, "its command exited"); r.code != ExitOK {
					t.Errorf("exit %d, want 0; stderr %q", r.code, r.stderr)
				}
			}
			if got := readyLines(t, file, 3); len(got) != 3 {
				t.Errorf("ready lines %q", got)
			}
			if p, err := b.List(t.Context(), "render/", lease.Page{}); err != nil || len(p.Leases) != 0 {
				t.Errorf("after the commands, List = %+v, %v; want every slot and the queue released", p.Leases, err)
			}
		})
	}
}

// TestRunSlotsLossStopsCommand: a slot is held as lease run holds a lease:
// when renewals fail, the command gets SIGTERM before the slot expires on
// the backend, and lease run exits 75.
func TestRunSlotsLossStopsCommand(t *testing.T) {
	g := &renewGate{Backend: memtest.New(t)}
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "term", file, 0)
	done := make(chan result, 1)
	// As in TestRunLossStopsCommandBeforeExpiry: a grace past the TTL, for
	// the child's exit under -race.
	go func() {
		done <- cli(t, g, nil, nil, runArgs(t, "render", "--slots", "3", "--ttl", "1s", "--grace", "5s", "--allow-grace-past-ttl")...)
	}()
	waitFile(t, file, "ready", 10*time.Second)
	last := g.fail()
	if !strings.HasPrefix(last.Key, "render/slots/") {
		t.Fatalf("the backend granted %q, not a slot", last.Key)
	}
	r := ended(t, done, "the slot was lost")
	if r.code != ExitTempFail {
		t.Errorf("exit %d, want %d; stderr %q", r.code, ExitTempFail, r.stderr)
	}
	line := waitFile(t, file, "term ", time.Second)
	var ns int64
	fmt.Sscanf(line, "term %d", &ns)
	if at := time.Unix(0, ns); !at.Before(last.Expires) {
		t.Errorf("SIGTERM at %v, not before the slot expired at %v", at, last.Expires)
	}
	if !strings.Contains(r.stderr, "SIGTERM") {
		t.Errorf("stderr %q does not say SIGTERM was sent", r.stderr)
	}
}

func TestRunSlotsUsageErrors(t *testing.T) {
	b := memtest.New(t)
	for _, flags := range [][]string{
		{"--slots", "0"},
		{"--slots", "-1"},
		{"--slots", "1025"},
		{"--slots", "x"},
	} {
		r := cli(t, b, nil, nil, runArgs(t, append([]string{"render"}, flags...)...)...)
		if r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", flags, r.code, ExitUsage, r.stderr)
		}
	}
	// The slots' keys must be valid keys.
	long := strings.Repeat("k", lease.MaxKeyLen-2)
	r := cli(t, b, nil, nil, runArgs(t, long, "--slots", "10")...)
	if r.code != ExitUsage {
		t.Errorf("a name too long for its slots' keys: exit %d, want %d (stderr %q)", r.code, ExitUsage, r.stderr)
	}
}

package cli

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
)

// newLeaseClient is a lease.Client on b, for the recipes the tests run.
func newLeaseClient(t *testing.T, b lease.Backend) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func campaign(t *testing.T, b lease.Backend, key, value string, ttl time.Duration) *election.Term {
	t.Helper()
	e, err := election.New(newLeaseClient(t, b), ttl)
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(t.Context(), key, value)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = term.Resign(t.Context()) })
	return term
}

// TestLeaderPrintsTheLeader: the leader's value, token and expiry, as text
// and JSON; exit 5 and one line when there is none.
func TestLeaderPrintsTheLeader(t *testing.T) {
	for _, be := range localBackends {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			r := cli(t, b, nil, nil, "leader", "db/primary")
			if r.code != ExitNotFound || r.stdout != "" {
				t.Fatalf("no leader: exit %d stdout %q, want %d and nothing", r.code, r.stdout, ExitNotFound)
			}
			oneErrorLine(t, r, "no leader", `"db/primary"`)

			term := campaign(t, b, "db/primary", "node 1", time.Minute)
			l := term.Lease()
			r = cli(t, b, nil, nil, "leader", "db/primary")
			want := `key=db/primary value="node 1" token=` + itoa(l.Token) + " expires_at=" + l.Expires.UTC().Format(expiresLayout) + "\n"
			if r.code != ExitOK || r.stdout != want {
				t.Errorf("exit %d, printed %q; want 0 and %q (stderr %q)", r.code, r.stdout, want, r.stderr)
			}
			r = cli(t, b, nil, nil, "leader", "db/primary", "-o", "json")
			var got leaderJSON
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
				t.Fatalf("-o json printed %q: %v", r.stdout, err)
			}
			if got != (leaderJSON{Key: "db/primary", Value: "node 1", Token: uint64(l.Token), ExpiresAt: l.Expires.UTC().Format(expiresLayout)}) {
				t.Errorf("-o json printed %+v for the term %+v", got, l)
			}
		})
	}
}

func itoa(tok lease.Token) string { return strconv.FormatUint(uint64(tok), 10) }

// waitUntil polls cond until it holds, failing t after patience.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(patience); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, patience)
		}
	}
}

// TestLeaderWatch: the leader now, then a line per change (a new term, the
// end of one), never a renewal, with rising tokens; SIGINT ends it with 0.
func TestLeaderWatch(t *testing.T) {
	backends := append(localBackends[:len(localBackends):len(localBackends)], struct {
		name string
		open func(t *testing.T) lease.Backend
	}{"without-watch", func(t *testing.T) lease.Backend { return backendOnly{localBackends[0].open(t)} }})
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			s := cliStream(t, b, "leader", "db/primary", "--watch")
			js := cliStream(t, b, "leader", "db/primary", "--watch", "-o", "json")
			if got := s.lines(t, 1); got[0] != "key=db/primary token=0" {
				t.Fatalf("first line %q, want no leader", got[0])
			}
			js.lines(t, 1)
			first := campaign(t, b, "db/primary", "node-1", 300*time.Millisecond)
			s.lines(t, 2)
			// A renewal (every 100ms) is not a change: the line after
			// node-1's must be the end of its term.
			granted := first.Lease().Expires
			waitUntil(t, "a renewal of the term", func() bool {
				l, err := b.Get(t.Context(), "db/primary")
				return err == nil && l.Expires.After(granted)
			})
			if err := first.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			// Both streams see the gap before the next term begins: a
			// reader that polls sees a gap only while it lasts.
			s.lines(t, 3)
			js.lines(t, 3)
			second := campaign(t, b, "db/primary", "node-2", time.Minute)
			s.lines(t, 4)
			js.lines(t, 4)
			if code := s.interrupt(t); code != ExitOK {
				t.Errorf("exit %d after SIGINT, want 0; stderr %q", code, s.stderr.String())
			}
			if code := js.interrupt(t); code != ExitOK {
				t.Errorf("-o json: exit %d after SIGINT, want 0; stderr %q", code, js.stderr.String())
			}
			got := s.lines(t, 4)
			if len(got) != 4 {
				t.Fatalf("%d lines, want 4: %q", len(got), got)
			}
			for i, w := range []struct {
				value string
				token lease.Token
			}{{"", 0}, {"node-1", first.Token()}, {"", 0}, {"node-2", second.Token()}} {
				if tokenOf(t, got[i]) != w.token || strings.Contains(got[i], "value=") != (w.value != "") ||
					(w.value != "" && !strings.Contains(got[i], " value="+w.value+" ")) {
					t.Errorf("line %d is %q, want value %q token %d", i, got[i], w.value, w.token)
				}
			}
			var tokens []uint64
			for _, line := range js.lines(t, 4) {
				var l leaderJSON
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatalf("-o json printed %q: %v", line, err)
				}
				tokens = append(tokens, l.Token)
			}
			if want := []uint64{0, uint64(first.Token()), 0, uint64(second.Token())}; !slices.Equal(tokens, want) {
				t.Errorf("-o json tokens %v, want %v", tokens, want)
			}
		})
	}
}

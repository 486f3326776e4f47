package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// TestWatchPrintsEvents: the state under the prefix, synced, then each
// change, one line each, as text and as JSON; keys outside the prefix are
// not told; SIGINT ends it with status 0.
func TestWatchPrintsEvents(t *testing.T) {
	for _, be := range localBackends {
		t.Run(be.name, func(t *testing.T) {
			ctx := t.Context()
			b := be.open(t)
			held, err := b.Acquire(ctx, "jobs/a", "alice", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			text := cliStream(t, b, "watch", "jobs/")
			js := cliStream(t, b, "watch", "jobs/", "-o", "json")
			text.lines(t, 2)
			js.lines(t, 2)
			if _, err := b.Acquire(ctx, "other/x", "carol", time.Minute); err != nil {
				t.Fatal(err)
			}
			l, err := b.Acquire(ctx, "jobs/b", "bob", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
			got := text.lines(t, 4)
			want := []string{
				"event=held " + textLine(withoutID(held)),
				"event=synced",
				"event=acquired " + textLine(withoutID(l)),
				"event=released " + textLine(withoutID(l)),
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("watch printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			var events []eventJSON
			for _, line := range js.lines(t, 4) {
				var ev eventJSON
				if err := json.Unmarshal([]byte(line), &ev); err != nil {
					t.Fatalf("watch -o json printed %q: %v", line, err)
				}
				events = append(events, ev)
			}
			for i, kind := range []string{"held", "synced", "acquired", "released"} {
				if events[i].Event != kind {
					t.Errorf("event %d is %q, want %q", i, events[i].Event, kind)
				}
			}
			if events[1].Lease != nil || events[2].Lease == nil || events[2].Lease.Key != "jobs/b" ||
				events[2].Lease.Token != l.Token || events[2].Lease.ID != "" {
				t.Errorf("synced carries %+v, acquired %+v; want none, and jobs/b token %d without an id", events[1].Lease, events[2].Lease, l.Token)
			}
			for _, s := range []*streaming{text, js} {
				if code := s.interrupt(t); code != ExitOK {
					t.Errorf("exit %d after SIGINT, want 0; stderr %q", code, s.stderr.String())
				}
				if s.stderr.String() != "" {
					t.Errorf("stderr %q, want nothing", s.stderr.String())
				}
			}
			if n := len(text.lines(t, 4)); n != 4 {
				t.Errorf("%d lines, want 4", n)
			}
		})
	}
}

func withoutID(l lease.Lease) lease.Lease {
	l.ID = lease.ID{}
	return l
}

// TestWatchRefusals: a backend that cannot watch, and bad arguments, end
// the command at once with one line.
func TestWatchRefusals(t *testing.T) {
	s := cliStream(t, backendOnly{localBackends[0].open(t)}, "watch", "jobs/")
	if code := s.exit(t); code != ExitFailure {
		t.Errorf("on a backend without watch: exit %d, want %d", code, ExitFailure)
	}
	oneErrorLine(t, result{stderr: s.stderr.String()}, "cannot watch")
	for _, args := range [][]string{
		{"watch", "a", "b"},
		{"watch", "bad\x01prefix"},
		{"watch", "-o", "yaml"},
	} {
		r := cli(t, localBackends[0].open(t), nil, nil, args...)
		if r.code != ExitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, r.code, ExitUsage, r.stderr)
		}
	}
}

// tokenOf returns the token= field of a text line.
func tokenOf(t *testing.T, line string) lease.Token {
	t.Helper()
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "token="); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("token in %q: %v", line, err)
			}
			return lease.Token(n)
		}
	}
	t.Fatalf("no token in %q", line)
	return 0
}

package watchhub

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

// feedLease is key's lease with token tok granted or renewed at second at
// of the engine's clock, for a minute.
func feedLease(key string, tok lease.Token, at int64) (lease.Lease, Version) {
	l := lease.Lease{Key: key, Owner: "o", Token: tok, TTL: time.Minute, Expires: time.Unix(at, 0).Add(time.Minute)}
	return l, Version{Token: tok, At: time.Unix(at, 0)}
}

func ended(key string, tok lease.Token) (lease.Lease, Version) {
	return lease.Lease{Key: key, Token: tok}, Version{Token: tok, Ended: true}
}

type checks struct {
	mu  sync.Mutex
	got [][]lease.Lease
}

func (c *checks) check(leases []lease.Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, leases)
}

func newTestFeed(t *testing.T) (*Feed, *fakeclock.Clock, *checks) {
	clk := fakeclock.New(time.Unix(0, 0))
	c := &checks{}
	f := NewFeed(New("test", DefaultBuffer), clk, c.check)
	t.Cleanup(func() { f.Close(lease.ErrUnavailable) })
	return f, clk, c
}

// joinWith is a Start that subscribes, lets between run (the stream's
// changes while the snapshot is read), and joins snap.
func joinWith(f *Feed, between func(), snap ...Entry) Start {
	return func(_ context.Context, sc Scope) (*Sub, error) {
		sub, err := f.Hub().SubscribeScope(sc)
		if err != nil {
			return nil, err
		}
		if between != nil {
			between()
		}
		return sub, f.Join(sub, snap)
	}
}

func held(l lease.Lease, v Version) Entry { return Entry{Lease: l, Held: true, Version: v} }

// TestFeedJoinTakesTheLaterState: a change the stream brought while the
// snapshot was read is newer than the snapshot's state: the watch starts
// from it, and is not told it again; an older one is in the snapshot and
// is not told either.
func TestFeedJoinTakesTheLaterState(t *testing.T) {
	f, _, _ := newTestFeed(t)
	a1, va1 := feedLease("p/a", 1, 10)
	a1r, va1r := feedLease("p/a", 1, 20)
	b1, vb1 := feedLease("p/b", 1, 10)
	next := pull(t, Watch(context.Background(), "p/", joinWith(f, func() {
		f.Change(lease.Acquired, b1, vb1)  // in the snapshot too
		f.Change(lease.Renewed, a1r, va1r) // after the snapshot's read of p/a
	}, held(a1, va1), held(b1, vb1))))
	ev, _, _ := next()
	if ev.Kind != lease.Held || ev.Lease.Key != "p/a" || !ev.Lease.Expires.Equal(a1r.Expires) {
		t.Fatalf("got %v %q expires %v, want Held p/a with the renewal's expiry %v", ev.Kind, ev.Lease.Key, ev.Lease.Expires, a1r.Expires)
	}
	want(t, next, got{lease.Held, "p/b", 1}, got{lease.Synced, "", 0})
	r, vr := ended("p/a", 1)
	f.Change(lease.Released, r, vr)
	f.Change(lease.Renewed, a1, va1) // late and older: dropped
	b2, vb2 := feedLease("p/b", 2, 30)
	f.Change(lease.Acquired, b2, vb2) // its predecessor was never released: it expired
	want(t, next, got{lease.Released, "p/a", 1}, got{lease.Expired, "p/b", 1}, got{lease.Acquired, "p/b", 2})
}

// TestFeedExpiryToldOnce: a lease ends once, whichever of its release,
// the check's expiry or its successor comes first.
func TestFeedExpiryToldOnce(t *testing.T) {
	f, clk, c := newTestFeed(t)
	next := pull(t, Watch(context.Background(), "p/", joinWith(f, nil)))
	want(t, next, got{lease.Synced, "", 0})
	a1, va1 := feedLease("p/a", 1, 0)
	f.Change(lease.Acquired, a1, va1)
	clk.Advance(time.Minute) // the expiry: the backend is asked
	c.mu.Lock()
	asked := len(c.got) == 1 && len(c.got[0]) == 1 && c.got[0][0].Token == 1
	c.mu.Unlock()
	if !asked {
		t.Fatalf("at the expiry the backend was asked about %v, want p/a token 1", c.got)
	}
	e, ve := ended("p/a", 1)
	f.Change(lease.Expired, e, ve)
	f.Change(lease.Expired, e, ve) // reported again (another store's check)
	f.Change(lease.Released, e, ve)
	a2, va2 := feedLease("p/a", 2, 70)
	f.Change(lease.Acquired, a2, va2)
	want(t, next, got{lease.Acquired, "p/a", 1}, got{lease.Expired, "p/a", 1}, got{lease.Acquired, "p/a", 2})
}

// TestFeedJoinTellsOlderWatchersAnExpiry: a new watch's snapshot finds
// ended a lease an older watch was told is held, with nothing on the
// stream about it: it expired, and the older watch is told so.
func TestFeedJoinTellsOlderWatchersAnExpiry(t *testing.T) {
	f, _, _ := newTestFeed(t)
	a1, va1 := feedLease("p/a", 1, 0)
	old := pull(t, Watch(context.Background(), "p/", joinWith(f, nil, held(a1, va1))))
	want(t, old, got{lease.Held, "p/a", 1}, got{lease.Synced, "", 0})
	e, ve := ended("p/a", 1)
	e.Owner = "o"
	late := pull(t, Watch(context.Background(), "p/", joinWith(f, nil, Entry{Lease: e, Version: ve})))
	want(t, late, got{lease.Synced, "", 0})
	want(t, old, got{lease.Expired, "p/a", 1})
	f.Change(lease.Expired, e, ve) // the older watch's own check, later: already told
	a2, va2 := feedLease("p/a", 2, 70)
	f.Change(lease.Acquired, a2, va2)
	want(t, old, got{lease.Acquired, "p/a", 2})
	want(t, late, got{lease.Acquired, "p/a", 2})
}

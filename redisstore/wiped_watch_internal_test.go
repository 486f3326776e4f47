package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasetest"
)

// watchEndBound is how long a test gives a running watch to end once the
// Store can know its namespace was wiped: it ends at once then (a
// goroutine's hand-off), or at the watched lease's expiry check, which
// comes within milliseconds of its expiry.
const watchEndBound = 10 * time.Second

// runningWatch is a watch of s on every key, running in the background.
type runningWatch struct {
	held  map[string]lease.Lease // its Held events, keyed by key
	ended chan error             // its error, or nil if it ended without one
}

// startWatch starts a watch of s on every key and returns once it has
// synced. The test's end stops it.
func startWatch(t *testing.T, ctx context.Context, s *Store) *runningWatch {
	t.Helper()
	wctx, stop := context.WithCancel(ctx)
	w := &runningWatch{held: map[string]lease.Lease{}, ended: make(chan error, 1)}
	synced := make(chan struct{})
	go func() {
		for ev, err := range s.Watch(wctx, "") {
			if err != nil {
				w.ended <- err
				return
			}
			switch ev.Kind {
			case lease.Held:
				w.held[ev.Lease.Key] = ev.Lease
			case lease.Synced:
				close(synced)
			}
		}
		w.ended <- nil
	}()
	t.Cleanup(func() { stop(); <-w.ended })
	select {
	case <-synced:
	case err := <-w.ended:
		t.Fatalf("the watch ended before it synced: %v", err)
	case <-ctx.Done():
		t.Fatal("the watch never synced")
	}
	return w
}

// refused fails t unless the watch ends, within watchEndBound, with the
// refusal of a Store whose namespace was wiped under it.
func (w *runningWatch) refused(t *testing.T, why string) {
	t.Helper()
	select {
	case err := <-w.ended:
		w.ended <- err // for the cleanup's wait
		refusesWiped(t, "a watch running when "+why, err)
	case <-time.After(watchEndBound):
		t.Fatalf("a watch running when %s still runs %v later (it began with %d leases held)", why, watchEndBound, len(w.held))
	}
}

// refusesNewWatches fails t unless a new Watch and WatchKey of s are
// refused, with the refusal of a Store whose namespace was wiped.
func refusesNewWatches(t *testing.T, ctx context.Context, s *Store) {
	t.Helper()
	for name, seq := range map[string]func(context.Context) func(func(lease.Event, error) bool){
		"Watch":    func(ctx context.Context) func(func(lease.Event, error) bool) { return s.Watch(ctx, "") },
		"WatchKey": func(ctx context.Context) func(func(lease.Event, error) bool) { return s.WatchKey(ctx, "k") },
	} {
		var first error
		for ev, err := range seq(ctx) {
			if err == nil {
				first = errors.New("it began with a " + ev.Kind.String() + " event")
			} else {
				first = err
			}
			break
		}
		refusesWiped(t, "a new "+name, first)
	}
}

// TestWipedEndsRunningWatches: a watch running when the Store finds its
// namespace wiped (here by a grant) shows leases the wipe took, held by
// nobody now, and would go on showing them, or the changes another Store
// makes on the new data, tokens from 1 again, as this Store's. It must end
// with the Store's refusal (ErrUnavailable, saying the namespace was
// wiped), so that lease.Follow watches again and is refused too; and a new
// watch is refused.
func TestWipedEndsRunningWatches(t *testing.T) {
	for _, w := range wipes {
		t.Run(w.name, func(t *testing.T) {
			eachLayout(t, func(t *testing.T, ctx context.Context, open func(string) *Store, admin *redis.Client) {
				ns := newNamespace()
				s := open(ns)
				leasetest.Grants(t, ctx, s, "k", 3, true)
				leasetest.Grants(t, ctx, s, "held", 1, false)
				watch := startWatch(t, ctx, s)
				if _, ok := watch.held["held"]; !ok {
					t.Fatalf("the watch's state: %v; want held", watch.held)
				}
				w.wipe(t, ctx, admin, ns)
				_, err := s.Acquire(ctx, "k", "w", time.Minute)
				refusesWiped(t, "Acquire", err)
				watch.refused(t, "a grant found the namespace wiped")
				refusesNewWatches(t, ctx, s)
			})
		})
	}
}

// TestWipeFoundWithoutAGrant: a Store whose namespace is wiped while it
// grants nothing (only watches, renewals and releases run, as under an
// election's observers and a leader that keeps its term) must still find
// out, or its watches show a dead holder for good: after a wipe the
// watched lease's expiry check found its token counter gone and told
// nothing; after another Store made the namespace anew and granted the key
// at token 1, the watch dropped that grant as older than the token 3 it
// showed, and its expiry check took the new lease for a successor. The
// watch must end with the refusal, and the Store refuse from then on.
func TestWipeFoundWithoutAGrant(t *testing.T) {
	type tc struct {
		name string
		ttl  time.Duration // of the watched lease
		// after runs once the namespace is wiped, with the Store, the
		// lease it holds and a Store made on the namespace since.
		after func(t *testing.T, ctx context.Context, s *Store, l lease.Lease, open func() *Store)
	}
	cases := []tc{
		{"its expiry", 300 * time.Millisecond, nil},
		{"made anew and granted", 300 * time.Millisecond, func(t *testing.T, ctx context.Context, _ *Store, _ lease.Lease, open func() *Store) {
			if l := leasetest.Grants(t, ctx, open(), "k", 1, false)[0]; l.Token != 1 {
				t.Fatalf("the new Store granted k at %d, want 1", l.Token)
			}
		}},
		{"made anew, granted and released", 300 * time.Millisecond, func(t *testing.T, ctx context.Context, _ *Store, _ lease.Lease, open func() *Store) {
			leasetest.Grants(t, ctx, open(), "k", 1, true)
		}},
		{"renewed", time.Minute, func(t *testing.T, ctx context.Context, s *Store, l lease.Lease, _ func() *Store) {
			if _, err := s.Renew(ctx, l, time.Minute); !errors.Is(err, lease.ErrNotHeld) {
				t.Fatalf("Renew of a lease the wipe took: %v; want ErrNotHeld", err)
			}
		}},
		{"renewed in a batch", time.Minute, func(t *testing.T, ctx context.Context, s *Store, l lease.Lease, _ func() *Store) {
			res, err := s.RenewBatch(ctx, []lease.Renewal{{Lease: l, TTL: time.Minute}})
			if err != nil || len(res) != 1 || !errors.Is(res[0].Err, lease.ErrNotHeld) {
				t.Fatalf("RenewBatch of a lease the wipe took: %v, %v; want one ErrNotHeld", res, err)
			}
		}},
		{"released", time.Minute, func(t *testing.T, ctx context.Context, s *Store, l lease.Lease, _ func() *Store) {
			if err := s.Release(ctx, l); !errors.Is(err, lease.ErrNotHeld) {
				t.Fatalf("Release of a lease the wipe took: %v; want ErrNotHeld", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachLayout(t, func(t *testing.T, ctx context.Context, open func(string) *Store, admin *redis.Client) {
				ns := newNamespace()
				s := open(ns)
				leasetest.Grants(t, ctx, s, "k", 2, true)
				l, err := s.Acquire(ctx, "k", "holder", c.ttl)
				if err != nil {
					t.Fatal(err)
				}
				watch := startWatch(t, ctx, s)
				if got := watch.held["k"]; got.Token != l.Token {
					t.Fatalf("the watch's state of k: %+v; want token %d held", got, l.Token)
				}
				if err := admin.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				if c.after != nil {
					c.after(t, ctx, s, l, func() *Store { return open(ns) })
				}
				watch.refused(t, "the namespace was wiped ("+c.name+")")
				_, err = s.Get(ctx, "k")
				refusesWiped(t, "Get", err)
				refusesNewWatches(t, ctx, s)
			})
		})
	}
}

// TestWatchStartFindsAWipe: a watch started on a wiped namespace, the
// first since (as lease.Follow's, once the restart of a server that lost
// its data broke its last), must be refused: it would show the new data,
// another Store's tokens from 1 again, as this Store's.
func TestWatchStartFindsAWipe(t *testing.T) {
	eachLayout(t, func(t *testing.T, ctx context.Context, open func(string) *Store, admin *redis.Client) {
		ns := newNamespace()
		s := open(ns)
		leasetest.Grants(t, ctx, s, "k", 3, true)
		if err := admin.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		leasetest.Grants(t, ctx, open(ns), "k", 1, false)
		refusesNewWatches(t, ctx, s)
		_, err := s.Get(ctx, "k")
		refusesWiped(t, "Get after a watch found the wipe", err)
	})
}

// TestFollowAcrossARestartWithoutData: the server restarted without its
// data (here emptied, then restarted) breaks every watch; lease.Follow
// watches again, and must hear the Store's refusal rather than follow the
// new, empty data as the old.
func TestFollowAcrossARestartWithoutData(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "restarting the server")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := newNamespace()
	s, err := New(srv.Client(t), WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := leasetest.Grants(t, ctx, s, "k", 1, false)[0]
	breaks := make(chan error, 100)
	synced := make(chan struct{}, 100)
	fctx, stop := context.WithCancel(ctx)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for ev, err := range lease.Follow(fctx, s, "", lease.FollowBackoff(time.Millisecond, 10*time.Millisecond),
			lease.FollowOnBreak(func(err error, _ time.Duration) error {
				select {
				case breaks <- err:
				default:
				}
				return nil
			})) {
			if err != nil {
				return
			}
			if ev.Kind == lease.Synced {
				synced <- struct{}{}
			}
		}
	}()
	defer func() { stop(); <-ended }()
	select {
	case <-synced:
	case <-ctx.Done():
		t.Fatal("Follow never synced")
	}
	if err := srv.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	deadline := time.After(watchEndBound)
	for {
		select {
		case err := <-breaks:
			if errors.Is(err, lease.ErrUnavailable) && strings.Contains(err.Error(), "wiped") {
				// Refused from now on.
				_, err := s.Renew(ctx, l, time.Minute)
				refusesWiped(t, "Renew", err)
				return
			}
		case <-synced:
			t.Fatalf("Follow synced again on the server restarted without %s's data, as if it were the Store's", ns)
		case <-deadline:
			t.Fatalf("Follow heard no refusal within %v of the restart", watchEndBound)
		}
	}
}

// TestBumpOnAWipedNamespace: Bump by a Store whose namespace was wiped
// under it must refuse, as every other operation does, and write no floor
// into the data in its place: it raised the new data's floor above tokens
// it never issued, and ended its leases, both another Store's now.
func TestBumpOnAWipedNamespace(t *testing.T) {
	for _, found := range []bool{false, true} {
		t.Run(map[bool]string{false: "unknown to the Store", true: "found by a grant"}[found], func(t *testing.T) {
			eachLayout(t, func(t *testing.T, ctx context.Context, open func(string) *Store, admin *redis.Client) {
				ns := newNamespace()
				s := open(ns)
				leasetest.Grants(t, ctx, s, "k", 3, true)
				if err := admin.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				fresh := open(ns)
				held := leasetest.Grants(t, ctx, fresh, "k", 1, false)[0]
				if found {
					_, err := s.Acquire(ctx, "other", "w", time.Minute)
					refusesWiped(t, "Acquire", err)
				}
				rep, err := s.Bump(ctx, 1000)
				if err == nil {
					t.Fatalf("Bump after the namespace was wiped and made anew: %+v", rep)
				}
				refusesWiped(t, "Bump", err)
				if _, err := fresh.Renew(ctx, held, time.Minute); err != nil {
					t.Fatalf("the new Store's lease after the refused Bump: %v", err)
				}
				if floors := scanNames(t, ctx, fresh, ns+"*"+floorSuffix); len(floors) != 0 {
					t.Fatalf("the refused Bump wrote floors into the new data: %q", floors)
				}
			})
		})
	}
}

// TestBumpFindsAWipeMidway: a namespace wiped while Bump runs, after it
// read the counters and before it raised the floor, must make it refuse,
// and on a single server (where its script can read the store id) write no
// floor into the new data.
func TestBumpFindsAWipeMidway(t *testing.T) {
	eachLayout(t, func(t *testing.T, ctx context.Context, open func(string) *Store, admin *redis.Client) {
		ns := newNamespace()
		s := open(ns)
		leasetest.Grants(t, ctx, s, "k", 3, true)
		s.beforeFloors = func() {
			if err := admin.FlushAll(ctx).Err(); err != nil {
				t.Error(err)
			}
		}
		rep, err := s.Bump(ctx, 1000)
		if err == nil {
			t.Fatalf("Bump with the namespace wiped under it: %+v", rep)
		}
		refusesWiped(t, "Bump", err)
		if !s.cluster {
			if floors := scanNames(t, ctx, s, ns+"*"+floorSuffix); len(floors) != 0 {
				t.Fatalf("the refused Bump wrote floors into the wiped namespace: %q", floors)
			}
		}
	})
}

// scanNames returns the key names matching pattern, on every master.
func scanNames(t *testing.T, ctx context.Context, s *Store, pattern string) []string {
	t.Helper()
	var names []string
	if err := s.scan(ctx, pattern, func(n string) { names = append(names, n) }); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestWatchHearsATokenGoBack: a running watch that knows a key free at
// token 3, when another Store grants it at token 1 on the namespace wiped
// and made anew, dropped that grant as older than what it knew: the watch
// showed the key free, held as it was, for as long as nothing else
// happened to the key, and no expiry check ran for it. A token below one
// the watch knows is a sign of a wipe; the watch must end with the
// Store's refusal.
func TestWatchHearsATokenGoBack(t *testing.T) {
	eachLayout(t, func(t *testing.T, ctx context.Context, open func(string) *Store, admin *redis.Client) {
		ns := newNamespace()
		s := open(ns)
		leasetest.Grants(t, ctx, s, "k", 3, true)
		watch := startWatch(t, ctx, s)
		if err := admin.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if l := leasetest.Grants(t, ctx, open(ns), "k", 1, false)[0]; l.Token != 1 {
			t.Fatalf("the new Store granted k at %d, want 1", l.Token)
		}
		watch.refused(t, "another Store granted k at token 1 on the namespace made anew")
		refusesNewWatches(t, ctx, s)
	})
}

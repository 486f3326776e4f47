package damage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/crashtest"
	"github.com/leasehq/lease/leasehttp"
)

// A State is a data directory as a crash (or a clean shutdown) left it,
// with every token any client was given while it served, and copies of its
// files taken earlier, for the damage that puts old files back.
type State struct {
	// Name is the crash point (CrashPoints).
	Name string
	// Dir holds lease.db and lease.db-wal as the crash left them.
	Dir string
	// Keys are the keys the clients used.
	Keys []string
	// Issued is the highest token any client was given, per key.
	Issued map[string]lease.Token
	// Acquisitions counts the acknowledged acquisitions.
	Acquisitions int
	// LastGrant is the latest instant, on the server's clock, at which a
	// client was granted a lease.
	LastGrant time.Time

	snaps []snapshot
}

// snapshot is a copy of both files taken while the server ran.
type snapshot struct {
	name string // "busy": copied under load; "checkpointed": right after a checkpoint
	dir  string
}

// snapshot is the snapshot of round: every crash state gets each in turn
// (the states themselves go round by round, Recipes).
func (s *State) snapshot(round int) snapshot {
	return s.snaps[(round+round/len(CrashPoints))%len(s.snaps)]
}

// CrashPoints are the moments a State's server is stopped:
//
//   - mid-load: kill -9 at a seeded moment while clients acquire;
//   - after-checkpoint: kill -9 once the load has stopped and the store
//     has checkpointed (lease.db changed), so the log holds nothing new;
//   - clean-shutdown: SIGINT, and the server's own orderly exit;
//   - since-checkpoint: kill -9 at the end of 800 ms of acquisitions and
//     releases back to back (burst) that began right after a checkpoint,
//     so the log holds hundreds of grants the file does not.
var CrashPoints = []string{"mid-load", "after-checkpoint", "clean-shutdown", "since-checkpoint"}

// Load is the work put on a state's server between its snapshots: the
// crash test's load (crashtest.Drive) on few keys, so tokens climb.
var Load = crashtest.Load{Workers: 6, Keys: 4, TTLs: []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond}}

// startBound is how long a start may take to listen or exit.
const startBound = 10 * time.Second

// Prepare serves a new data directory under root with the lease binary bin,
// drives load on it, copies its files once under load and once right after
// a checkpoint, drives more, and stops it at crash point point.
func Prepare(ctx context.Context, bin, root, point string, seed uint64) (*State, error) {
	st := &State{Name: point, Dir: filepath.Join(root, point, "data"), Issued: map[string]lease.Token{}}
	for k := range Load.Keys {
		st.Keys = append(st.Keys, crashtest.KeyName(k))
	}
	if err := os.MkdirAll(st.Dir, 0o700); err != nil {
		return nil, err
	}
	started := time.Now()
	srv, err := crashtest.StartServe(bin, st.Dir, startBound)
	if err != nil {
		return nil, fmt.Errorf("damage: starting lease serve for %s: %w", point, err)
	}
	defer srv.Kill()
	c, err := leasehttp.NewClient(srv.URL, leasehttp.WithTimeout(3*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	h := &crashtest.History{}
	rng := rand.New(rand.NewPCG(seed, 0))
	load := Load
	load.Seed, load.Owner = seed, point
	drive := func(d time.Duration, during func()) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		done := make(chan struct{})
		go func() { crashtest.Drive(ctx, c, load, h); close(done) }()
		if during != nil {
			during()
		}
		<-done
	}
	db := filepath.Join(st.Dir, DBFile)

	// Copied under load, as a backup tool that knows nothing of the store
	// would: the log first, then the file.
	var snapErr error
	drive(600*time.Millisecond, func() {
		time.Sleep(300 * time.Millisecond)
		snapErr = st.copyOut("busy")
	})
	if snapErr != nil {
		return nil, snapErr
	}
	if err := checkpointed(ctx, c, st.Keys[0], db, h); err != nil {
		return nil, err
	}
	if err := st.copyOut("checkpointed"); err != nil {
		return nil, err
	}
	switch point {
	case "mid-load":
		drive(time.Second, func() {
			time.Sleep(100*time.Millisecond + time.Duration(rng.Int64N(int64(800*time.Millisecond))))
			srv.Kill()
		})
	case "after-checkpoint":
		drive(600*time.Millisecond, nil)
		if err := checkpointed(ctx, c, st.Keys[0], db, h); err != nil {
			return nil, err
		}
		srv.Kill()
	case "clean-shutdown":
		drive(600*time.Millisecond, nil)
		if err := srv.Stop(15 * time.Second); err != nil {
			return nil, err
		}
	case "since-checkpoint":
		drive(600*time.Millisecond, nil)
		if err := checkpointed(ctx, c, st.Keys[0], db, h); err != nil {
			return nil, err
		}
		bctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { burst(bctx, c, st.Keys, h); close(done) }()
		time.Sleep(800 * time.Millisecond)
		srv.Kill()
		cancel()
		<-done
	default:
		return nil, fmt.Errorf("damage: no crash point %q", point)
	}
	acqs := h.Snapshot()
	st.Acquisitions = len(acqs)
	for _, a := range acqs {
		st.Issued[a.Key] = max(st.Issued[a.Key], lease.Token(a.Token))
		if a.Grant().After(st.LastGrant) {
			st.LastGrant = a.Grant()
		}
	}
	if bad := crashtest.Check(acqs); len(bad) > 0 {
		return nil, fmt.Errorf("damage: the history of %s, before any damage, breaks I1 or I3: %v", point, bad)
	}
	// The other condition of a clock floor: no key granted more than once
	// per microsecond on average (a new store's tokens start at 1).
	for k, tok := range st.Issued {
		if us := st.LastGrant.Sub(started).Microseconds(); int64(tok) > us {
			return nil, fmt.Errorf("damage: %s: %q reached token %d in %d µs, faster than a clock floor allows", point, k, tok, us)
		}
	}
	if len(st.Issued) != len(st.Keys) {
		return nil, fmt.Errorf("damage: the load on %s acquired only %d of %d keys", point, len(st.Issued), len(st.Keys))
	}
	return st, nil
}

// burst acquires and releases every key back to back, one client per
// key, recording each token in h, until ctx ends: as many grants as the
// store can make durable.
func burst(ctx context.Context, c *leasehttp.Client, keys []string, h *crashtest.History) {
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Go(func() {
			for ctx.Err() == nil {
				sent := h.Clock.Add(1)
				l, err := c.Acquire(ctx, key, "burst", time.Second)
				if err != nil {
					continue // the server is gone, or the key still held from before
				}
				a := crashtest.Acknowledged("burst", l, sent, h.Clock.Add(1))
				a.ReleaseTried = true // before sending: its effect may precede any answer
				h.Add(a)
				_ = c.Release(ctx, l)
			}
		})
	}
	wg.Wait()
}

// copyOut copies the store's files to a snapshot named name.
func (s *State) copyOut(name string) error {
	dir := filepath.Join(filepath.Dir(s.Dir), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{LogFile, DBFile, LeadFile} {
		if err := copyFile(filepath.Join(s.Dir, f), filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	s.snaps = append(s.snaps, snapshot{name, dir})
	return nil
}

// CopyTo copies the state's files into a new data directory dir.
func (s *State) CopyTo(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{DBFile, LogFile, LeadFile} {
		if err := copyFile(filepath.Join(s.Dir, f), filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	return nil
}

// checkpointed makes one write (an acquire, recorded in h, and its
// release) and waits until the file at db changes: the store has
// checkpointed it, as it does about once a second while writes come. It
// then gives the checkpoint 100 ms to finish.
func checkpointed(ctx context.Context, c *leasehttp.Client, key, db string, h *crashtest.History) error {
	before, err := os.Stat(db)
	if err != nil {
		return err
	}
	sent := h.Clock.Add(1)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := c.AcquireWait(wctx, key, "checkpoint", time.Second)
	if err != nil {
		return fmt.Errorf("damage: acquiring %q before a checkpoint: %w", key, err)
	}
	a := crashtest.Acknowledged("checkpoint", l, sent, h.Clock.Add(1))
	a.ReleaseTried = true
	h.Add(a)
	if err := c.Release(ctx, l); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Stat(db)
		if err != nil {
			return err
		}
		if !fi.ModTime().Equal(before.ModTime()) || fi.Size() != before.Size() {
			time.Sleep(100 * time.Millisecond)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("damage: %s not checkpointed within 10 s of a write", db)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package sqlguardtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// RaceTx is one writer's transaction for Race.
type RaceTx interface {
	// Check runs the guard's Check in the transaction.
	Check(ctx context.Context, resource string, token lease.Token) error
	// Record, after an admitted Check, reads resource's token in the data
	// table (0 if no row) and writes token there, and adds a row (read,
	// token) to the history table: the token the write replaced, as the
	// transaction saw it, committed with the write or not at all.
	Record(ctx context.Context, resource string, token lease.Token) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// RaceEngine is a guard on a database with a data table and a history
// table, for Race.
type RaceEngine struct {
	// Begin starts a writer's transaction; readFirst asks it to read the
	// data table first (a snapshot, in the levels that take one).
	Begin func(ctx context.Context, readFirst bool) (RaceTx, error)
	// History returns resource's committed history rows: (replaced, token).
	History func(ctx context.Context, resource string) ([][2]int64, error)
	// Highest is the guard's committed mark of resource.
	Highest func(ctx context.Context, resource string) (lease.Token, error)
	// Retry recognises an error after which the caller retries the whole
	// transaction: a serialization failure or a deadlock victim. Such a
	// transaction is rolled back and counts as not written.
	Retry func(error) bool
}

// Race runs trials rounds; in each, writers concurrent transactions on
// one resource, each with a random token from 1 to 5 (so that equal tokens
// meet), reading first or not, and committing or rolling back at random.
// It fails t if a committed write replaced a token its mode does not admit
// below it — a late write committed after a newer one — or if the final
// mark or data differ from the newest committed token; any error but a
// stale token or e.Retry's fails it too. It returns how many writes
// committed, were refused as stale and were retried.
func Race(t *testing.T, e RaceEngine, mode fence.Mode, trials, writers int, seed uint64) (committed, stale, retried int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for trial := range trials {
		res := fmt.Sprintf("race-%d-%d-%d", seed, mode, trial)
		type plan struct {
			token             lease.Token
			readFirst, commit bool
		}
		plans := make([]plan, writers)
		for i := range plans {
			plans[i] = plan{lease.Token(1 + rng.IntN(5)), rng.IntN(2) == 0, rng.IntN(4) != 0}
		}
		var mu sync.Mutex
		var newest lease.Token
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, p := range plans {
			wg.Go(func() {
				<-start
				ok, err := raceOne(ctx, e, res, p.token, p.readFirst, p.commit)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && ok:
					committed++
					newest = max(newest, p.token)
				case err == nil:
				case errors.Is(err, lease.ErrStaleToken):
					stale++
				case e.Retry(err):
					retried++
				default:
					t.Errorf("%s: writer with token %d: %v", res, p.token, err)
				}
			})
		}
		close(start)
		wg.Wait()
		hist, err := e.History(ctx, res)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hist {
			if !mode.Admits(lease.Token(h[1]), lease.Token(h[0])) {
				t.Errorf("%s (%v): a write with token %d committed over token %d: history %v", res, mode, h[1], h[0], hist)
			}
		}
		if h, err := e.Highest(ctx, res); err != nil || h != newest {
			t.Errorf("%s: mark %d (%v), want the newest committed token %d", res, h, err, newest)
		}
	}
	return committed, stale, retried
}

// raceOne runs one writer's transaction and reports whether it committed
// a write.
func raceOne(ctx context.Context, e RaceEngine, res string, token lease.Token, readFirst, commit bool) (bool, error) {
	tx, err := e.Begin(ctx, readFirst)
	if err != nil {
		return false, err
	}
	if err := tx.Check(ctx, res, token); err != nil {
		_ = tx.Rollback(ctx)
		return false, err
	}
	if err := tx.Record(ctx, res, token); err != nil {
		_ = tx.Rollback(ctx)
		return false, err
	}
	if !commit {
		return false, tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	return true, nil
}

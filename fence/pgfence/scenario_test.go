package pgfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/pgstore"
)

// paused is worker A's view of the backend while its process is frozen: its
// renewals never get through (they block until the Hold gives up on them).
type paused struct{ lease.Backend }

func (paused) Renew(ctx context.Context, _ lease.Lease, _ time.Duration) (lease.Lease, error) {
	<-ctx.Done()
	return lease.Lease{}, context.Cause(ctx)
}

// TestSeedScenario is the failure a TTL lock alone cannot stop, end to end
// on PostgreSQL: A acquires with a 100 ms TTL, pauses past it, B acquires
// and writes, A wakes and writes late — and the guard rejects A.
func TestSeedScenario(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, ctx context.Context, pool *pgxpool.Pool, g *pgfence.Guard, token lease.Token, value string) error
	}{
		{"Check", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool, g *pgfence.Guard, token lease.Token, value string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := g.Check(ctx, tx, "job", token); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE jobs SET value = $1, fencing_token = $2 WHERE id = 'job'`, value, int64(token))
				return err
			})
		}},
		{"UpdateRow", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool, _ *pgfence.Guard, token lease.Token, value string) error {
			return pgfence.UpdateRow(ctx, pool, pgfence.Update{
				Table: pgx.Identifier{"jobs"}, IDColumn: "id", ID: "job", TokenColumn: "fencing_token", Token: token,
				Set: map[string]any{"value": value}, Mode: fence.Strict,
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := newPool(t)
			ctx := testCtx(t)
			if _, err := pool.Exec(ctx, `CREATE TABLE jobs (id text PRIMARY KEY, value text NOT NULL, fencing_token bigint NOT NULL DEFAULT 0);
				INSERT INTO jobs (id, value) VALUES ('job', 'initial')`); err != nil {
				t.Fatal(err)
			}
			store, err := pgstore.New(pool)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			g := newGuard(t, pool, pgfence.WithMode(fence.Strict)) // the seed's FencedResource: each token once
			clientA, err := lease.NewClient(paused{store}, lease.WithOwner("worker-a"))
			if err != nil {
				t.Fatal(err)
			}
			clientB, err := lease.NewClient(store, lease.WithOwner("worker-b"))
			if err != nil {
				t.Fatal(err)
			}

			// 1. A acquires.
			holdA, err := clientA.TryAcquire(ctx, "job", 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			t1 := holdA.Token()
			// 2. A pauses; B is already waiting for the lease.
			type acquired struct {
				h   *lease.Hold
				err error
			}
			bGot := make(chan acquired, 1)
			go func() {
				h, err := clientB.Acquire(ctx, "job", time.Minute)
				bGot <- acquired{h, err}
			}()
			// 3. A's lease runs out: its Hold says so (A is frozen and cannot
			// look, but the signal is there when it wakes)...
			select {
			case <-holdA.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("A's Hold not cancelled 10 s after its 100 ms TTL")
			}
			if err := holdA.Err(); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("A's Hold.Err = %v, want ErrLost", err)
			}
			// ...and B gets the lease with a newer token, and writes.
			var b acquired
			select {
			case b = <-bGot:
			case <-time.After(10 * time.Second):
				t.Fatal("B did not get the lease within 10 s")
			}
			if b.err != nil {
				t.Fatalf("B's Acquire: %v", b.err)
			}
			defer b.h.Release(ctx)
			t2 := b.h.Token()
			if t2 <= t1 {
				t.Fatalf("B's token %d is not above A's %d", t2, t1)
			}
			if err := tc.write(t, ctx, pool, g, t2, "written-by-b"); err != nil {
				t.Fatalf("B's write: %v", err)
			}
			// 4. A wakes and writes late with its old token: rejected.
			err = tc.write(t, ctx, pool, g, t1, "written-by-a")
			var se *fence.StaleTokenError
			if !errors.As(err, &se) || se.Token != t1 || se.Highest != t2 {
				t.Fatalf("A's late write: err = %v, want a StaleTokenError for token %d with highest %d", err, t1, t2)
			}
			var value string
			var token int64
			if err := pool.QueryRow(ctx, `SELECT value, fencing_token FROM jobs WHERE id = 'job'`).Scan(&value, &token); err != nil {
				t.Fatal(err)
			}
			// Per-key tokens start at 1 and rise by one per acquisition.
			if value != "written-by-b" || lease.Token(token) != t2 || t1 != 1 || t2 != 2 {
				t.Fatalf("final row value=%q token=%d (A had %d, B %d); want written-by-b with token 2", value, token, t1, t2)
			}
			if err := holdA.Release(ctx); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("A's Release after the loss: %v, want ErrLost", err)
			}
			if got, err := store.Get(ctx, "job"); err != nil || got.Owner != "worker-b" || got.Token != t2 {
				t.Fatalf("A's late release disturbed B: Get = %+v, %v", got, err)
			}
		})
	}
}

package pgfence_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
	"github.com/leasehq/lease/pgstore"
)

// TestSeedScenario is the failure a TTL lock alone cannot stop, end to end
// on PostgreSQL, leases (pgstore) and guarded row both there: A acquires
// with a 100 ms TTL, pauses past it, B acquires and writes, A wakes and
// writes late — and the guard rejects A, by Check and by UpdateRow.
func TestSeedScenario(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(ctx context.Context, pool *pgxpool.Pool, g *pgfence.Guard, token lease.Token, value string) error
	}{
		{"Check", func(ctx context.Context, pool *pgxpool.Pool, g *pgfence.Guard, token lease.Token, value string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := g.Check(ctx, tx, "job", token); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE jobs SET value = $1, fencing_token = $2 WHERE id = 'job'`, value, int64(token))
				return err
			})
		}},
		{"UpdateRow", func(ctx context.Context, pool *pgxpool.Pool, _ *pgfence.Guard, token lease.Token, value string) error {
			return pgfence.UpdateRow(ctx, pool, pgfence.Update{
				Table: pgx.Identifier{"jobs"}, IDColumn: "id", ID: "job", TokenColumn: "fencing_token", Token: token,
				Set: map[string]any{"value": value}, Mode: fence.Strict,
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := newPool(t)
			if _, err := pool.Exec(testCtx(t), `CREATE TABLE jobs (id text PRIMARY KEY, value text NOT NULL, fencing_token bigint NOT NULL DEFAULT 0);
				INSERT INTO jobs (id, value) VALUES ('job', 'initial')`); err != nil {
				t.Fatal(err)
			}
			store, err := pgstore.New(pool)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			g := newGuard(t, pool, pgfence.WithMode(fence.Strict)) // the seed's FencedResource: each token once
			sqlguardtest.SeedScenario(t, store, pgJob{pool, g, tc.write})
		})
	}
}

// pgJob is the jobs row the scenario writes.
type pgJob struct {
	pool  *pgxpool.Pool
	g     *pgfence.Guard
	write func(ctx context.Context, pool *pgxpool.Pool, g *pgfence.Guard, token lease.Token, value string) error
}

func (j pgJob) Write(ctx context.Context, token lease.Token, value string) error {
	return j.write(ctx, j.pool, j.g, token, value)
}

func (j pgJob) Read(ctx context.Context) (string, lease.Token, error) {
	var value string
	var token int64
	err := j.pool.QueryRow(ctx, `SELECT value, fencing_token FROM jobs WHERE id = 'job'`).Scan(&value, &token)
	return value, lease.Token(token), err
}

package pgfence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
)

// TestRace runs many writers with random tokens at once on one resource,
// in each isolation level, reading before the Check or not, and checks the
// history their transactions committed: no write replaced a token its mode
// does not admit below it (sqlguardtest.Race).
func TestRace(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	for _, ddl := range []string{
		`CREATE TABLE race_data (resource text PRIMARY KEY, token bigint NOT NULL)`,
		`CREATE TABLE race_hist (resource text NOT NULL, replaced bigint NOT NULL, token bigint NOT NULL)`,
	} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	const trials, writers = 100, 6
	seed := uint64(0)
	for _, level := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
			name := strings.ReplaceAll(string(level), " ", "-") + "/" + mode.String()
			t.Run(name, func(t *testing.T) {
				seed++
				g := newGuard(t, pool, pgfence.WithMode(mode), pgfence.WithTable("race_"+strings.ReplaceAll(name, "-", "_")))
				e := sqlguardtest.RaceEngine{
					Begin: func(ctx context.Context, readFirst bool) (sqlguardtest.RaceTx, error) {
						tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
						if err != nil {
							return nil, err
						}
						if readFirst {
							var n int
							if err := tx.QueryRow(ctx, `SELECT count(*) FROM race_data`).Scan(&n); err != nil {
								_ = tx.Rollback(ctx)
								return nil, err
							}
						}
						return raceTx{g, tx}, nil
					},
					History: func(ctx context.Context, res string) ([][2]int64, error) {
						rows, _ := pool.Query(ctx, `SELECT replaced, token FROM race_hist WHERE resource = $1`, res)
						return pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]int64, error) {
							var h [2]int64
							err := r.Scan(&h[0], &h[1])
							return h, err
						})
					},
					Highest: func(ctx context.Context, res string) (lease.Token, error) { return g.Highest(ctx, pool, res) },
					Retry: func(err error) bool {
						var pe *pgconn.PgError
						return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
					},
				}
				c, s, r := sqlguardtest.Race(t, e, mode, trials, writers, seed)
				t.Logf("%d trials of %d writers: %d writes committed, %d refused as stale, %d retried; none committed late", trials, writers, c, s, r)
			})
		}
	}
}

type raceTx struct {
	g  *pgfence.Guard
	tx pgx.Tx
}

func (x raceTx) Check(ctx context.Context, res string, token lease.Token) error {
	return x.g.Check(ctx, x.tx, res, token)
}

// Record reads the data row FOR UPDATE: the latest committed token, not
// an older snapshot's.
func (x raceTx) Record(ctx context.Context, res string, token lease.Token) error {
	var replaced int64
	err := x.tx.QueryRow(ctx, `SELECT token FROM race_data WHERE resource = $1 FOR UPDATE`, res).Scan(&replaced)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if _, err := x.tx.Exec(ctx, `INSERT INTO race_hist VALUES ($1, $2, $3)`, res, replaced, int64(token)); err != nil {
		return err
	}
	_, err = x.tx.Exec(ctx, `INSERT INTO race_data VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token`, res, int64(token))
	return err
}

func (x raceTx) Commit(ctx context.Context) error   { return x.tx.Commit(ctx) }
func (x raceTx) Rollback(ctx context.Context) error { return x.tx.Rollback(ctx) }

package sqlfence_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/sqlfence"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
)

// TestSeedScenario is the failure a TTL lock alone cannot stop, end to end
// on each engine, leases from boltstore: A acquires with a 100 ms TTL,
// pauses past it, B acquires and writes, A wakes and writes late — and the
// guard rejects A, by Check and by UpdateRow.
func TestSeedScenario(t *testing.T) {
	forEach(t, func(t *testing.T, e engine) {
		for _, write := range []string{"Check", "UpdateRow"} {
			t.Run(write, func(t *testing.T) {
				ctx := testCtx(t)
				for _, stmt := range []string{`DROP TABLE IF EXISTS jobs`,
					`CREATE TABLE jobs (id VARCHAR(16) PRIMARY KEY, value VARCHAR(64) NOT NULL, fencing_token BIGINT NOT NULL DEFAULT 0)`,
					`INSERT INTO jobs (id, value) VALUES ('job', 'initial')`} {
					if _, err := e.db.ExecContext(ctx, stmt); err != nil {
						t.Fatal(err)
					}
				}
				store, err := boltstore.Open(filepath.Join(t.TempDir(), "lease.db"))
				if err != nil {
					t.Fatal(err)
				}
				defer store.Close()
				// The seed's FencedResource: each token once.
				g := newGuard(t, e, sqlfence.WithMode(fence.Strict), sqlfence.WithTable("fence_"+write))
				sqlguardtest.SeedScenario(t, store, sqlJob{e, g, write == "Check"})
			})
		}
	})
}

// sqlJob is the jobs row the scenario writes, through Guard.Check in a
// transaction or through UpdateRow.
type sqlJob struct {
	e     engine
	g     *sqlfence.Guard
	check bool
}

func (j sqlJob) Write(ctx context.Context, token lease.Token, value string) error {
	if !j.check {
		return sqlfence.UpdateRow(ctx, j.e.db, j.e.d, sqlfence.Update{
			Table: []string{"jobs"}, IDColumn: "id", ID: "job", TokenColumn: "fencing_token", Token: token,
			Set: map[string]any{"value": value}, Mode: fence.Strict,
		})
	}
	tx, err := j.e.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := j.g.Check(ctx, tx, "job", token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET value = ?, fencing_token = ? WHERE id = 'job'`, value, int64(token)); err != nil {
		return err
	}
	return tx.Commit()
}

func (j sqlJob) Read(ctx context.Context) (string, lease.Token, error) {
	var value string
	var token int64
	err := j.e.db.QueryRowContext(ctx, `SELECT value, fencing_token FROM jobs WHERE id = 'job'`).Scan(&value, &token)
	return value, lease.Token(token), err
}

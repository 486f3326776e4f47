package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/tools/chaos"
)

// lingering is a backend that keeps every lease extra longer than asked,
// without saying so (Engine.Linger 0): an engine slower to hand a key on
// than the run believes, as any engine is on a loaded machine. It hides the
// backend's optional interfaces, so its clients poll.
type lingering struct {
	lease.Backend
	extra time.Duration
}

func (b lingering) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	return b.Backend.Acquire(ctx, key, owner, ttl+b.extra)
}

func (b lingering) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	return b.Backend.Renew(ctx, l, ttl+b.extra)
}

// TestPauseLastsUntilANewerTokenIsAccepted: the driver's pause must make a
// stale writer whatever the engine's timing. On an engine that keeps a
// lease a second longer than the run believes, a pause of a fixed length
// (TTL + linger + up to a TTL) ended while the paused worker's lease was
// still the engine's, so its "late" write was not late at all: the guard
// rightly took it, and the run proved nothing. The pause lasts until the
// guard has accepted a newer token on the key.
func TestPauseLastsUntilANewerTokenIsAccepted(t *testing.T) {
	ttl := 200 * time.Millisecond
	b := startBoltHTTP(t)
	e := b.engine(ttl)
	connect := e.Connect
	e.Name = "bolt-lingering"
	e.Connect = func(ctx context.Context, addrs []string) (lease.Backend, func(), error) {
		c, closeFn, err := connect(ctx, addrs)
		if err != nil {
			return nil, nil, err
		}
		return lingering{Backend: c, extra: time.Second}, closeFn, nil
	}
	res := chaos.Run(t, chaos.Config{Engine: e, Seed: 12, TTL: ttl, Workers: 3, Faults: 1, Kinds: []chaos.Fault{chaos.Pause}})
	s := res.Stats
	t.Logf("%d pauses (%d made a stale writer), %d writes (%d accepted, %d rejected)", s.Pauses, s.Late.Stale, s.Writes, s.Accepted, s.Rejected)
	chaos.RequireLinearizable(t, res)
	if s.Pauses != 1 || s.Rejected == 0 {
		t.Fatalf("%d pauses, %d writes rejected; want the one pause's late write rejected\nlast events:\n%s", s.Pauses, s.Rejected, res.Events)
	}
	if s.Late != (chaos.LateWrites{Stale: 1, Rejected: 1, Told: 1}) {
		t.Errorf("late writes %+v, want the one pause's stale writer, its one late write rejected, and then its hold lost", s.Late)
	}
}

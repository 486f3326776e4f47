package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasetest"
)

// bumpStores runs f on a store on a single server and on one through a
// ClusterClient on a cluster-mode server (which refuses a script whose keys
// span two hash slots).
func bumpStores(t *testing.T, f func(t *testing.T, s *Store, ctx context.Context)) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			t.Cleanup(cancel)
			var client redis.UniversalClient
			if cluster {
				client = redistest.Start(t, redistest.Cluster()).ClusterClient(t)
			} else {
				client = redistest.Start(t).Client(t)
			}
			s, err := New(client, WithNamespace("t-"+lease.NewID().Reveal()[:12]))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			f(t, s, ctx)
		})
	}
}

// dumped is a backup of a namespace's keys: DUMP of each, with its PTTL.
type dumped map[string]struct {
	val  string
	pttl time.Duration
}

// dump backs up every key of s's namespace (DUMP, as an RDB holds them).
func dump(t *testing.T, ctx context.Context, s *Store) dumped {
	t.Helper()
	var names []string
	if err := s.scan(ctx, s.ns+":*", func(n string) { names = append(names, n) }); err != nil {
		t.Fatal(err)
	}
	out := dumped{}
	for _, n := range names {
		v, err := s.rdb.Dump(ctx, n).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", n, err)
		}
		ttl, err := s.rdb.PTTL(ctx, n).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", n, err)
		}
		out[n] = struct {
			val  string
			pttl time.Duration
		}{v, max(ttl, 0)}
	}
	return out
}

// restore puts s's namespace back as d has it: every key of the namespace
// deleted, then every key of d RESTOREd with its TTL.
func (d dumped) restore(t *testing.T, ctx context.Context, s *Store) {
	t.Helper()
	var names []string
	if err := s.scan(ctx, s.ns+":*", func(n string) { names = append(names, n) }); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := s.rdb.Del(ctx, n).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for n, k := range d {
		if err := s.rdb.Restore(ctx, n, k.pttl, k.val).Err(); err != nil {
			t.Fatalf("RESTORE %s: %v", n, err)
		}
	}
}

// TestBumpAfterRestore backs the namespace's keys up (DUMP), grants more
// (on a key the backup knows and on keys created after it), restores the
// backup (RESTORE, over a namespace emptied first) and bumps. Every token
// the store issues then is above every token it issued before, for keys the
// backup knows and keys it does not, in every hash slot they land in; the
// lease the backup held is ended.
func TestBumpAfterRestore(t *testing.T) {
	bumpStores(t, func(t *testing.T, s *Store, ctx context.Context) {
		before := leasetest.Grants(t, ctx, s, "A", 3, true)
		held := leasetest.Grants(t, ctx, s, "held", 2, false)
		backup := dump(t, ctx, s)
		after := leasetest.Grants(t, ctx, s, "A", 4, true)
		var created [][]lease.Lease
		for i := range 20 {
			created = append(created, leasetest.Grants(t, ctx, s, fmt.Sprintf("B%d", i), 3, true))
		}
		issued := max(leasetest.Highest(before, held, after), leasetest.Highest(created...))

		backup.restore(t, ctx, s)
		const n = 100
		rep, err := s.Bump(ctx, n)
		if err != nil {
			t.Fatalf("Bump: %v", err)
		}
		if backupTop := leasetest.Highest(before, held); rep.Keys != 2 || rep.Top != backupTop || rep.Floor != backupTop+n || rep.Leases != 1 {
			t.Fatalf("Bump: %+v; want 2 keys, top %d, floor %d, 1 lease ended", rep, backupTop, backupTop+n)
		}
		// Every floor is there and at the new value.
		for _, k := range s.floorKeys() {
			if v, err := s.rdb.Get(ctx, k).Uint64(); err != nil || v != uint64(rep.Floor) {
				t.Fatalf("floor %s after Bump: %d, %v; want %d", k, v, err, rep.Floor)
			}
		}

		last := held[len(held)-1]
		if _, err := s.Get(ctx, "held"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("Get of the lease the backup held, after Bump: %v, want ErrNotFound", err)
		}
		if _, err := s.Renew(ctx, last, time.Minute); !errors.Is(err, lease.ErrNotHeld) {
			t.Errorf("Renew of the lease the backup held, after Bump: %v, want ErrNotHeld", err)
		}
		keys := []string{"A", "held", "never-seen"}
		for i := range created {
			keys = append(keys, fmt.Sprintf("B%d", i))
		}
		for _, k := range keys {
			l := leasetest.Grants(t, ctx, s, k, 1, true)[0]
			if l.Token <= issued || l.Token <= rep.Floor {
				t.Errorf("after the restore and Bump, %q got token %d; the store issued up to %d before, the floor is %d", k, l.Token, issued, rep.Floor)
			}
		}
	})
}

// TestBumpLimits: tokens stay below 2^53. A bump that would leave no token
// below it above the floor is refused and changes nothing; the highest
// floor allowed issues exactly 2^53 - 1, and nothing after it.
func TestBumpLimits(t *testing.T) {
	bumpStores(t, func(t *testing.T, s *Store, ctx context.Context) {
		if _, err := s.Bump(ctx, 0); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("Bump(0): %v, want ErrInvalid", err)
		}
		l := leasetest.Grants(t, ctx, s, "k", 1, false)[0]
		for _, n := range []uint64{tokenLimit - 2, 1 << 63, ^uint64(0)} {
			if _, err := s.Bump(ctx, n); !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("Bump(%d) over token 1: %v, want ErrInvalid", n, err)
			}
		}
		if _, err := s.Renew(ctx, l, time.Minute); err != nil {
			t.Fatalf("Renew after refused bumps: %v", err)
		}
		if n, err := s.rdb.Exists(ctx, s.floorKeys()[0]).Result(); err != nil || n != 0 {
			t.Fatalf("a refused bump wrote a floor: %d, %v", n, err)
		}
		rep, err := s.Bump(ctx, tokenLimit-3)
		if err != nil || rep.Floor != lease.Token(tokenLimit-2) {
			t.Fatalf("Bump to 2^53 - 2: %+v, %v", rep, err)
		}
		if l := leasetest.Grants(t, ctx, s, "other", 1, true)[0]; l.Token != lease.Token(tokenLimit-1) {
			t.Fatalf("first token above the floor 2^53 - 2: %d, want 2^53 - 1", l.Token)
		}
		if _, err := s.Acquire(ctx, "other", "o", time.Minute); err == nil || !strings.Contains(err.Error(), "exhausted") {
			t.Fatalf("Acquire past 2^53: %v, want token space exhausted", err)
		}
	})
}

// TestSlotsMatchRedis checks the hash slots computed here against the
// server's own (CLUSTER KEYSLOT, on a cluster-mode server): every slot's
// floor key and copy of the store id lands in that slot, and the lease keys
// of odd user keys land where keySlot says, in the slot of the floor key and
// store id copy their grants read.
func TestSlotsMatchRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Cluster())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := &Store{ns: "ns", cluster: true}
	c := srv.Client(t)
	floors := s.floorKeys()
	if len(floors) != numSlots {
		t.Fatalf("%d floor keys on Cluster, want %d", len(floors), numSlots)
	}
	keyslot := func(names []string) []int64 {
		cmds := make([]*redis.IntCmd, len(names))
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, n := range names {
				cmds[i] = p.ClusterKeySlot(ctx, n)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		out := make([]int64, len(names))
		for i, cmd := range cmds {
			out[i] = cmd.Val()
		}
		return out
	}
	for slot, got := range keyslot(floors) {
		if got != int64(slot) {
			t.Fatalf("floor key %q of slot %d is in slot %d", floors[slot], slot, got)
		}
	}
	ids := s.slotIDKeys()
	for slot, got := range keyslot(ids) {
		if got != int64(slot) {
			t.Fatalf("store id copy %q of slot %d is in slot %d", ids[slot], slot, got)
		}
	}
	users := []string{"a", "A", "job/1", "a}b", "a{b}c", "{", "}", "{}", "%", "%7D", "é", strings.Repeat("x", 512)}
	for i := range 200 {
		users = append(users, fmt.Sprintf("key-%d", i))
	}
	var names []string
	for _, k := range users {
		names = append(names, s.acquireKeys(k)...)
	}
	names = append(names, "plain", "{}x", "x{}", "{a", "a}", "}{a}")
	want := keyslot(names)
	for i, n := range names {
		if got := keySlot(n); int64(got) != want[i] {
			t.Errorf("keySlot(%q) = %d, Redis says %d", n, got, want[i])
		}
	}
	for i := 0; i < 4*len(users); i += 4 {
		if want[i] != want[i+2] || want[i+1] != want[i+2] || want[i+3] != want[i+2] {
			t.Errorf("acquire keys %q in slots %v", names[i:i+4], want[i:i+4])
		}
	}
}

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
)

// BumpReport says what Bump did.
type BumpReport struct {
	Keys   int         // token counters: every key ever acquired in the namespace
	Top    lease.Token // the highest counter, or floor if higher
	Floor  lease.Token // every token issued from now on is above it
	Leases int         // leases that were held, all ended by the bump
}

// bumpChunk bounds the commands of one pipeline of Bump.
const bumpChunk = 1000

// Bump raises the namespace's token floor to n above the highest token it
// knows (every counter, and the floor itself) and ends every lease. Run it
// after restoring the server from an RDB or AOF older than its last write,
// before anything serves it: from then on every key, whether the restored
// counters know it or not, issues tokens above any the server could have
// issued after the backup, unless some key was granted more than n times
// since (I1). The leases the restored data holds are ended, not kept, as
// their holders may have given them up or lost them since: each ends as a
// release does (told to waiters and watchers), Renew and Release of it
// answer lease.ErrNotHeld, and its key is free at once. `lease bump` runs it
// with n = 2^40 (boltstore.DefaultBump) unless told otherwise.
//
// The floor is one key, NS:floor, on a single server; on Cluster one per
// hash slot (a grant's script can reach only its own slot), all 16384 of
// them raised. Bump SCANs every counter and every lease (on Cluster, on
// every master), so it costs the whole keyspace, and it is not atomic: a
// Store serving meanwhile keeps every key's tokens rising, but a grant
// made during the bump may come out below the new floor, or be ended by it.
//
// While the Store's last re-check found the server's persistence volatile
// (doc.go, Persistence), Bump is refused as a grant is, with an error
// matching ErrVolatile and lease.ErrUnavailable: a floor a crash loses lets
// tokens go back once grants resume.
//
// n must be at least 1, and the new floor below 2^53 - 1 (tokens stay
// below 2^53), so that a token above it still fits; otherwise Bump changes
// nothing and returns an error matching lease.ErrInvalid.
//
// Bump bumps the namespace the Store serves, and no other: a Store that
// refuses (its namespace wiped under it: doc.go, Wipes) refuses Bump too,
// and Bump checks the store id itself, before it reads the counters,
// before it ends the leases and after, and in the script of each floor
// raised and lease ended (on Cluster where the hash slot's copy of the id
// is there to read), so that the data of a namespace wiped and made anew
// since the Store read its id is neither bumped nor its leases ended; it
// then answers the Store's refusal, which stands. On Cluster a wipe
// while the floors are raised can leave raised floors in the wiped
// namespace (its slots' copies of the id went with it), which only raises
// the tokens of the data made there next.
func (s *Store) Bump(ctx context.Context, n uint64) (BumpReport, error) {
	if n == 0 {
		return BumpReport{}, fmt.Errorf("%w: redisstore: Bump needs at least 1", lease.ErrInvalid)
	}
	if err := s.refused(); err != nil {
		return BumpReport{}, err
	}
	if err := s.grantRefused(); err != nil {
		// A floor a crash can lose lets tokens go back once grants resume.
		return BumpReport{}, fmt.Errorf("redisstore: bump: %w", err)
	}
	fail := func(what string, err error) (BumpReport, error) {
		if ctx.Err() != nil {
			return BumpReport{}, fmt.Errorf("redisstore: bump: %s: %w", what, err)
		}
		return BumpReport{}, fmt.Errorf("redisstore: bump: %s: %w: %w", what, lease.ErrUnavailable, err)
	}
	check := func(when string) error {
		refusal, err := s.checkStoreID(ctx, "bumping it, "+when)
		if err != nil {
			_, err = fail("reading the store id", err)
			return err
		}
		return refusal
	}
	// refusedBy returns the refusal of a floor.lua or end.lua that found
	// another store id, or nil.
	refusedBy := func(cmdErr error, when string) error {
		if cmdErr == nil || !redis.HasErrorPrefix(cmdErr, idRefusedPrefix) {
			return nil
		}
		found := strings.TrimPrefix(strings.TrimPrefix(cmdErr.Error(), "ERR "), idRefusedPrefix)
		if !s.cluster {
			return s.wipedErr("bumping it, "+when, s.ns+storeIDSuffix, found)
		}
		if err := check(when); err != nil {
			return err
		}
		// The store id key holds the Store's id, and a slot's copy
		// another, which only a restore of part of the data leaves.
		return fmt.Errorf("redisstore: bump: %w: a hash slot's copy of the store id holds %q, not %s, the store id this Store serves: "+
			"its data is not this Store's; restore it whole", lease.ErrUnavailable, found, s.id)
	}
	if err := check("before reading its counters"); err != nil {
		return BumpReport{}, err
	}
	// strict: the store id key is read itself (one server), not a hash
	// slot's copy, which the slot's first grant makes (Cluster).
	strict := "1"
	if s.cluster {
		strict = "0"
	}
	var rep BumpReport
	var counters []string
	if err := s.scan(ctx, s.counterPattern(""), func(name string) { counters = append(counters, name) }); err != nil {
		return fail("scanning the token counters", err)
	}
	slices.Sort(counters)
	counters = slices.Compact(counters) // SCAN may return a key twice
	rep.Keys = len(counters)
	floors := s.floorKeys()
	var top uint64
	for chunk := range slices.Chunk(append(counters, floors...), bumpChunk) {
		cmds := make([]*redis.StringCmd, len(chunk))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range chunk {
				cmds[i] = p.Get(ctx, k)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return fail("reading the token counters", err)
		}
		for i, c := range cmds {
			v, err := c.Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return fail("reading the token counters", err)
			}
			t, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return BumpReport{}, fmt.Errorf("redisstore: bump: %s holds %q, not a token: %w", chunk[i], v, lease.ErrUnavailable)
			}
			top = max(top, t)
		}
	}
	next := top + n
	if next < top || next >= tokenLimit-1 {
		return BumpReport{}, fmt.Errorf("%w: redisstore: bump: the highest token %d + %d leaves no token below 2^53: use a smaller bump", lease.ErrInvalid, top, n)
	}
	rep.Top, rep.Floor = lease.Token(top), lease.Token(next)
	arg := strconv.FormatUint(next, 10)
	if s.beforeFloors != nil {
		s.beforeFloors()
	}
	for start := 0; start < len(floors); start += bumpChunk {
		chunk := floors[start:min(start+bumpChunk, len(floors))]
		cmds := make([]*redis.Cmd, len(chunk))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range chunk {
				idKey := s.ns + storeIDSuffix
				if s.cluster {
					idKey = s.slotIDKey(start + i) // floors are in slot order
				}
				cmds[i] = floorScript.Eval(ctx, p, []string{k, idKey}, arg, s.idArg, strict)
			}
			return nil
		})
		for _, c := range cmds {
			if r := refusedBy(c.Err(), "raising its floors"); r != nil {
				return BumpReport{}, r
			}
		}
		if err != nil {
			return fail("raising the token floor", err)
		}
	}
	if err := check("before ending its leases"); err != nil {
		return BumpReport{}, err
	}
	var leases []string
	if err := s.scan(ctx, s.listPattern(""), func(name string) { leases = append(leases, name) }); err != nil {
		return fail("scanning the leases", err)
	}
	slices.Sort(leases)
	leases = slices.Compact(leases)
	for chunk := range slices.Chunk(leases, bumpChunk) {
		cmds := make([]*redis.Cmd, 0, len(chunk))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, name := range chunk {
				if k, ok := s.userKey(name); ok {
					cmds = append(cmds, endScript.Eval(ctx, p, []string{name, s.acquireKeys(k)[3]}, s.channel, k, s.changesArg, s.idArg, strict))
				}
			}
			return nil
		})
		for _, c := range cmds {
			if r := refusedBy(c.Err(), "ending its leases"); r != nil {
				return BumpReport{}, r
			}
		}
		if err != nil {
			return fail("ending the leases", err)
		}
		for _, c := range cmds {
			if n, _ := c.Int64(); n == 1 {
				rep.Leases++
			}
		}
	}
	if err := check("after it"); err != nil {
		return BumpReport{}, err
	}
	return rep, nil
}

package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
)

// scanCount is the COUNT hint of each SCAN call: fewer round trips over a
// big keyspace, each still short enough not to stall the server.
const scanCount = 1000

// List implements lease.Backend. There is no index to keep consistent (it
// could not share a hash slot with every lease on Cluster), so each page
// SCANs the keyspace — on Cluster, every master — for the namespace's lease
// keys under prefix, keeps the page's worth (and one more) that come first
// after the cursor's key, then reads those leases with one pipelined GET
// each. A page's cost grows with the whole keyspace of the database, token
// counters of every key ever leased included, and a walk's with that times
// the pages: it is for operators and the CLI, not for hot paths. SCAN
// returns every key that exists throughout it, so each page holds every
// lease held throughout its reading that belongs on it.
func (s *Store) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	limit, after, err := lease.ParseList(prefix, page)
	if err != nil {
		return lease.ListPage{}, err
	}
	if err := s.refused(); err != nil {
		return lease.ListPage{}, err
	}
	var out []lease.Lease
	for {
		// Leases that expire or are released between the SCAN and the
		// GET leave the page short: look again past the keys read.
		need := limit + 1 - len(out)
		keys, err := s.firstAfter(ctx, prefix, after, need)
		if err != nil {
			return lease.ListPage{}, s.fail(ctx, "list", prefix, err)
		}
		cmds, err := s.getMany(ctx, keys)
		if err != nil {
			return lease.ListPage{}, s.fail(ctx, "list", prefix, err)
		}
		for i, k := range keys {
			res, err := cmds[i].Result()
			if errors.Is(err, redis.Nil) {
				continue // expired or released since the scan
			}
			if err != nil {
				return lease.ListPage{}, s.fail(ctx, "list", prefix, err)
			}
			v, err := parseValue(res)
			if err != nil {
				return lease.ListPage{}, s.malformed("list", k, err)
			}
			out = append(out, v.lease(k))
		}
		if len(keys) < need || len(out) > limit {
			return lease.PageOf(out, limit), nil
		}
		after = keys[len(keys)-1]
	}
}

// firstAfter returns, in order, the first n user keys under prefix that
// come after after, of the lease keys a SCAN finds. It keeps at most 2n
// keys at a time, however many the SCAN finds.
func (s *Store) firstAfter(ctx context.Context, prefix, after string, n int) ([]string, error) {
	var keys []string
	trim := func() {
		slices.Sort(keys)
		keys = slices.Compact(keys) // SCAN may return a key twice
		keys = keys[:min(len(keys), n)]
	}
	err := s.scan(ctx, s.listPattern(prefix), func(name string) {
		if k, ok := s.userKey(name); ok && k > after && strings.HasPrefix(k, prefix) {
			if keys = append(keys, k); len(keys) >= 2*n {
				trim()
			}
		}
	})
	trim()
	return keys, err
}

// scan calls found with each name matching pattern on every master, one
// call at a time.
func (s *Store) scan(ctx context.Context, pattern string, found func(name string)) error {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return scanNode(ctx, s.rdb, pattern, found)
	}
	var mu sync.Mutex
	return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return scanNode(ctx, c, pattern, func(name string) {
			mu.Lock()
			defer mu.Unlock()
			found(name)
		})
	})
}

func scanNode(ctx context.Context, c redis.Cmdable, pattern string, found func(name string)) error {
	iter := c.Scan(ctx, 0, pattern, scanCount).Iterator()
	for iter.Next(ctx) {
		found(iter.Val())
	}
	return iter.Err()
}

// getMany GETs the leases of keys in one pipeline (on Cluster, one per
// node).
func (s *Store) getMany(ctx context.Context, keys []string) ([]*redis.StringCmd, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, s.leaseKey(k))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return cmds, nil
}

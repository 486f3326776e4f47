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
// could not share a hash slot with every lease on Cluster), so List SCANs
// the keyspace — on Cluster, every master — for the namespace's lease keys
// under prefix, then reads the leases found with one pipelined GET each. Its cost grows with the whole keyspace of the database, token
// counters of every key ever leased included, not with the number of
// matches: it is for operators and the CLI, not for hot paths. Leases that
// expire during the scan are left out.
func (s *Store) List(ctx context.Context, prefix string) ([]lease.Lease, error) {
	names, err := s.scan(ctx, s.listPattern(prefix))
	if err != nil {
		return nil, s.fail(ctx, "list", prefix, err)
	}
	keys := make([]string, 0, len(names))
	for _, name := range names {
		if k, ok := s.userKey(name); ok && strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys) // SCAN may return a key twice

	cmds, err := s.getMany(ctx, keys)
	if err != nil {
		return nil, s.fail(ctx, "list", prefix, err)
	}
	out := make([]lease.Lease, 0, len(keys))
	for i, k := range keys {
		res, err := cmds[i].Result()
		if errors.Is(err, redis.Nil) {
			continue // expired or released since the scan
		}
		if err != nil {
			return nil, s.fail(ctx, "list", prefix, err)
		}
		v, err := parseValue(res)
		if err != nil {
			return nil, s.malformed("list", k, err)
		}
		out = append(out, v.lease(k))
	}
	return out, nil
}

// scan returns the names matching pattern on every master.
func (s *Store) scan(ctx context.Context, pattern string) ([]string, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return scanNode(ctx, s.rdb, pattern)
	}
	var (
		mu  sync.Mutex
		all []string
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		names, err := scanNode(ctx, c, pattern)
		mu.Lock()
		all = append(all, names...)
		mu.Unlock()
		return err
	})
	return all, err
}

func scanNode(ctx context.Context, c redis.Cmdable, pattern string) ([]string, error) {
	var names []string
	iter := c.Scan(ctx, 0, pattern, scanCount).Iterator()
	for iter.Next(ctx) {
		names = append(names, iter.Val())
	}
	return names, iter.Err()
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

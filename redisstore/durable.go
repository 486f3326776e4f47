package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
)

// ErrVolatile means the Redis server's configuration cannot keep tokens
// rising across a restart (invariant I1), or cannot be read to prove that it
// does, and the store was not told to run anyway (AllowVolatile,
// AssumeDurable). The error names the settings and how to fix them.
var ErrVolatile = errors.New("redisstore: redis server is not durable")

// durableSettings are the settings checked, with the value each must have.
// maxmemory-policy is judged together with maxmemory.
var durableSettings = []string{"appendonly", "appendfsync", "no-appendfsync-on-rewrite", "maxmemory", "maxmemory-policy"}

// checkDurable reads the persistence settings of every node the client
// knows (masters and replicas of a cluster: a replica becomes the master on
// failover) in one round trip per node. New runs it with all the settings;
// the Store's re-checks (recheck.go) with runtime set, which leaves out
// appendonly: acquire.lua reads that itself, in every grant.
func checkDurable(ctx context.Context, client redis.UniversalClient, runtime bool) error {
	if cc, ok := client.(*redis.ClusterClient); ok {
		var (
			mu   sync.Mutex
			errs []error
		)
		err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := checkNode(ctx, c, c.Options().Addr, runtime); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("redisstore: listing cluster nodes: %w: %w", lease.ErrUnavailable, err)
		}
		return errors.Join(errs...)
	}
	addr := "the server"
	if c, ok := client.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	return checkNode(ctx, client, addr, runtime)
}

func checkNode(ctx context.Context, c redis.Cmdable, addr string, runtime bool) error {
	// One CONFIG GET per setting, pipelined: Redis before 7.0 takes one
	// pattern per call.
	cmds := make([]*redis.MapStringStringCmd, len(durableSettings))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range durableSettings {
			cmds[i] = p.ConfigGet(ctx, name)
		}
		return nil
	})
	got := make(map[string]string, len(durableSettings))
	for i, name := range durableSettings {
		m, err := cmds[i].Result()
		if err != nil {
			var rerr redis.Error
			if errors.As(err, &rerr) {
				// The server answered but will not say: CONFIG is renamed,
				// disabled or forbidden to this user.
				return fmt.Errorf("%w: cannot read the persistence settings of %s (CONFIG GET %s: %v), so cannot prove that tokens survive a restart; "+
					"if the server does run with appendonly yes and appendfsync always and evicts nothing, pass redisstore.AssumeDurable(); "+
					"to run without that guarantee pass redisstore.AllowVolatile()", ErrVolatile, addr, name, err)
			}
			return fmt.Errorf("redisstore: reading the persistence settings of %s: %w: %w", addr, lease.ErrUnavailable, err)
		}
		v, ok := m[name]
		if !ok {
			return fmt.Errorf("%w: %s does not report %s, so cannot prove that tokens survive a restart; pass redisstore.AssumeDurable() if it is durable, or redisstore.AllowVolatile()", ErrVolatile, addr, name)
		}
		got[name] = v
	}

	var problems, fixes []string
	if got["appendonly"] != "yes" && !runtime {
		problems = append(problems, fmt.Sprintf("appendonly is %q (want yes: without the AOF a restart forgets every token counter)", got["appendonly"]))
		fixes = append(fixes, "CONFIG SET appendonly yes")
	}
	if got["appendfsync"] != "always" {
		problems = append(problems, fmt.Sprintf("appendfsync is %q (want always: otherwise a crash loses the last second of grants)", got["appendfsync"]))
		fixes = append(fixes, "CONFIG SET appendfsync always")
	}
	if got["no-appendfsync-on-rewrite"] != "no" {
		problems = append(problems, fmt.Sprintf("no-appendfsync-on-rewrite is %q (want no: otherwise grants are not fsynced during an AOF rewrite)", got["no-appendfsync-on-rewrite"]))
		fixes = append(fixes, "CONFIG SET no-appendfsync-on-rewrite no")
	}
	if p := got["maxmemory-policy"]; got["maxmemory"] != "0" && p != "noeviction" {
		problems = append(problems, fmt.Sprintf("maxmemory-policy is %q with maxmemory %s (want noeviction: allkeys-* policies evict token counters, volatile-* ones evict held leases)", p, got["maxmemory"]))
		fixes = append(fixes, "CONFIG SET maxmemory-policy noeviction")
	}
	if len(problems) == 0 {
		return nil
	}
	cli := "redis-cli"
	if host, port, err := net.SplitHostPort(addr); err == nil {
		cli = fmt.Sprintf("redis-cli -h %s -p %s", host, port)
	}
	return fmt.Errorf("%w: %s: %s; fix it with `%s` and %s, then CONFIG REWRITE (or set the same in redis.conf), "+
		"or pass redisstore.AllowVolatile() to accept tokens that can go backwards",
		ErrVolatile, addr, strings.Join(problems, "; "), cli, strings.Join(fixes, "; "))
}

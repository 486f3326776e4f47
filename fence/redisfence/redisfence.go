// Package redisfence guards values kept in Redis with fencing tokens: each
// resource is a hash holding the value, the highest token accepted and the
// ID of the Set call that wrote them, and one Lua script compares the
// writer's token with it and writes value and token together only if the
// token is admitted (fence.AtLeast by default, or fence.Strict). A rejected
// write changes nothing and returns a *fence.StaleTokenError (I6).
//
//	g, _ := redisfence.New(ctx, rdb)
//	err := g.Set(ctx, "report", hold.Token(), "done")
//	// errors.Is(err, lease.ErrStaleToken): a newer holder has written
//
// Guard does not implement fence.Guard: that interface runs an arbitrary Go
// write under the guard, and nothing outside a Redis script can be atomic
// with the check. Keep the guarded data in the resource's value instead.
//
// Because the value and its token live in one key, they are persisted,
// replicated and lost together: a Redis without persistence that forgets
// the token forgets the value with it, so the guard needs no durability of
// its own beyond what the data needs. The guard does not notice such a loss:
// what Redis forgot is as if never written, and a token below the forgotten
// one is admitted again (no older value ever replaces a newer one that
// Redis kept, but a write acknowledged to the newer holder is gone). Where
// an acknowledged write must stay fenced, run Redis as redisstore requires
// (appendonly yes, appendfsync always) and fail over only to replicas that
// have every write (WAIT). Each resource is one key, so Guard works
// unchanged on Redis Cluster.
package redisfence

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

//go:embed set.lua
var setSrc string

// Script.Run sends EVALSHA and falls back to EVAL on NOSCRIPT.
var setScript = redis.NewScript(setSrc)

// DefaultPrefix is put before each resource name to make its key name,
// unless WithPrefix sets another.
const DefaultPrefix = "fence:"

// Client is what Guard needs of a go-redis client; *redis.Client,
// *redis.ClusterClient and the other go-redis clients have it.
type Client interface {
	redis.Scripter
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
}

// Guard admits writes to values in Redis by fencing token. It is safe for
// concurrent use; the atomicity comes from the server.
type Guard struct {
	rdb    Client
	prefix string
	mode   fence.Mode
}

// Option configures a Guard.
type Option func(*config) error

type config struct {
	prefix string
	mode   fence.Mode
}

// WithMode sets the rule tokens are admitted by: fence.AtLeast (the
// default: one holder may write many times) or fence.Strict (each token
// writes once).
func WithMode(m fence.Mode) Option {
	return func(c *config) error {
		if err := fence.ValidateMode(m); err != nil {
			return fmt.Errorf("redisfence: %w", err)
		}
		c.mode = m
		return nil
	}
}

// WithPrefix sets the text put before each resource name to make its key
// name (default DefaultPrefix). It may be empty.
func WithPrefix(p string) Option {
	return func(c *config) error {
		if len(p) > 256 {
			return fmt.Errorf("%w: redisfence: prefix is %d bytes, more than 256", lease.ErrInvalid, len(p))
		}
		c.prefix = p
		return nil
	}
}

// New returns a Guard keeping its resources on client, after loading its
// script into the server (every master of a cluster): a server that cannot
// be reached or refuses scripts fails New, with an error matching
// lease.ErrUnavailable, as a database that cannot hold pgfence's or
// sqlfence's table fails theirs, rather than the first Set. ctx bounds
// the load.
func New(ctx context.Context, client Client, opts ...Option) (*Guard, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisfence: client is nil", lease.ErrInvalid)
	}
	cfg := config{prefix: DefaultPrefix, mode: fence.AtLeast}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: redisfence: nil option", lease.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := setScript.Load(ctx, client).Err(); err != nil {
		return nil, fmt.Errorf("redisfence: loading the guard's script: %w: %w", lease.ErrUnavailable, err)
	}
	return &Guard{rdb: client, prefix: cfg.prefix, mode: cfg.mode}, nil
}

// Mode returns the rule the guard admits tokens by.
func (g *Guard) Mode() fence.Mode { return g.mode }

// Set stores value as resource's value and token as its highest accepted
// token, if the mode admits token — in one script call. Otherwise it returns
// a *fence.StaleTokenError naming the highest token accepted, and changes
// nothing. Each call carries a random ID, stored with the value, so that
// the client's own retry of a call whose answer was lost (go-redis sends
// the command again) is answered with the write the first attempt made,
// not judged as a second write (which Strict mode would refuse as stale).
// A retry that arrives after a newer token's write is refused, although
// the first attempt's value was stored until then. Resource names follow the rules of lease keys (1 to 512 bytes of
// UTF-8 without control characters); the error for a bad name or token
// matches lease.ErrInvalid, and one from the server lease.ErrUnavailable.
func (g *Guard) Set(ctx context.Context, resource string, token lease.Token, value string) error {
	if err := errors.Join(lease.ValidateKey(resource), fence.ValidateToken(token)); err != nil {
		return fmt.Errorf("redisfence: set: %w", err)
	}
	mode := "at-least"
	if g.mode == fence.Strict {
		mode = "strict"
	}
	// The call's ID makes the client's own retries of this call (go-redis
	// sends a command again when its answer was lost) find their write
	// rather than be judged as a second one.
	var call [12]byte
	_, _ = rand.Read(call[:])
	res, err := setScript.Run(ctx, g.rdb, []string{g.prefix + resource},
		strconv.FormatUint(uint64(token), 10), value, mode, hex.EncodeToString(call[:])).Int64Slice()
	if err != nil {
		return g.fail(ctx, "set", resource, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redisfence: set %q: unexpected reply %v: %w", resource, res, lease.ErrUnavailable)
	}
	if res[0] != 1 {
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: lease.Token(res[1]), Mode: g.mode}
	}
	return nil
}

// Get returns resource's value and the highest token accepted for it, or an
// error matching lease.ErrNotFound if it was never written.
func (g *Guard) Get(ctx context.Context, resource string) (value string, token lease.Token, err error) {
	if err := lease.ValidateKey(resource); err != nil {
		return "", 0, fmt.Errorf("redisfence: get: %w", err)
	}
	vals, err := g.rdb.HMGet(ctx, g.prefix+resource, "value", "token").Result()
	if err != nil {
		return "", 0, g.fail(ctx, "get", resource, err)
	}
	v, ok1 := vals[0].(string)
	t, ok2 := vals[1].(string)
	if !ok1 || !ok2 {
		return "", 0, fmt.Errorf("redisfence: get %q: %w", resource, lease.ErrNotFound)
	}
	// The spelling set.lua accepts and writes: plain decimal, 1 to 2^53.
	n, err := fence.ParseToken(t)
	if err != nil {
		return "", 0, fmt.Errorf("redisfence: get %q: stored token %.20q is not a token: %w", resource, t, lease.ErrUnavailable)
	}
	return v, n, nil
}

func (g *Guard) fail(ctx context.Context, op, resource string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("redisfence: %s %q: %w", op, resource, err)
	}
	return fmt.Errorf("redisfence: %s %q: %w: %w", op, resource, lease.ErrUnavailable, err)
}

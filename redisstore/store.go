package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed get.lua
	getSrc string

	// Script.Run sends EVALSHA and falls back to EVAL on NOSCRIPT (after a
	// server restart or SCRIPT FLUSH): one round trip in the steady state.
	acquireScript = redis.NewScript(acquireSrc)
	renewScript   = redis.NewScript(renewSrc)
	releaseScript = redis.NewScript(releaseSrc)
	getScript     = redis.NewScript(getSrc)
)

// tokenLimit bounds the tokens the store issues: below 2^53, so that the Lua
// scripts (whose numbers are doubles) compare them exactly and every token
// stays within lease.MaxToken.
const tokenLimit = uint64(lease.MaxToken)

// DefaultNamespace is the prefix of every key name the store uses, unless
// WithNamespace sets another.
const DefaultNamespace = "lease"

// Store is a lease.Backend on Redis. It is safe for concurrent use.
type Store struct {
	rdb           redis.UniversalClient
	ownsClient    bool
	ns            string
	channel       string
	allowVolatile bool
	assumeDurable bool
	notify        *notifier
}

var (
	_ lease.Backend  = (*Store)(nil)
	_ lease.Notifier = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store) error

// AllowVolatile lets the store run on a server that cannot keep tokens
// rising across a restart (appendonly no, appendfsync other than always, an
// eviction policy, or settings that cannot be read). Without it such a
// server is refused with ErrVolatile (I7). With it, a restart of a server
// without persistence starts every key's tokens again at 1, and a guard that
// has seen the old tokens rejects the new holders' writes — or, worse, a
// guard that lost its state too accepts a stale writer's.
func AllowVolatile() Option {
	return func(s *Store) error { s.allowVolatile = true; return nil }
}

// AssumeDurable skips the persistence check for servers that hide their
// configuration (CONFIG renamed or forbidden, as some managed services do):
// the caller vouches that the server runs with appendonly yes and appendfsync
// always, and does not evict keys.
func AssumeDurable() Option {
	return func(s *Store) error { s.assumeDurable = true; return nil }
}

// WithNamespace sets the prefix of the store's key names and release channel
// (default DefaultNamespace), so that several independent stores can share a
// server. It must be 1 to 64 bytes without braces or control characters.
func WithNamespace(ns string) Option {
	return func(s *Store) error {
		if err := validateNamespace(ns); err != nil {
			return fmt.Errorf("%w: redisstore: %v", lease.ErrInvalid, err)
		}
		s.ns = ns
		return nil
	}
}

// Open connects to the Redis server at url (redis://[user:password@]host:port/db,
// or rediss:// for TLS; go-redis' ParseURL options such as pool_size apply),
// checks that its persistence keeps tokens rising (see New), and returns a
// Store that closes the connection on Close.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: redisstore: %v", lease.ErrInvalid, err)
	}
	c := redis.NewClient(o)
	s, err := New(ctx, c, opts...)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s.ownsClient = true
	return s, nil
}

// New returns a Store on client, which may be a *redis.Client, a
// *redis.ClusterClient or a failover client; Close leaves it open.
//
// New checks every node it can reach with CONFIG GET and refuses, with an
// error matching ErrVolatile that names the settings and how to fix them, a
// server that runs without appendonly yes and appendfsync always, with
// no-appendfsync-on-rewrite yes, or with a memory limit and an eviction
// policy other than noeviction — unless AllowVolatile or AssumeDurable is
// given. A server that cannot be reached gives an error matching
// lease.ErrUnavailable.
func New(ctx context.Context, client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore: client is nil", lease.ErrInvalid)
	}
	s := &Store{rdb: client, ns: DefaultNamespace}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: redisstore: nil option", lease.ErrInvalid)
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.channel = s.ns + channelSuffix
	if !s.allowVolatile && !s.assumeDurable {
		if err := checkDurable(ctx, client); err != nil {
			return nil, err
		}
	}
	s.notify = newNotifier(s)
	return s, nil
}

// Close stops the store's release subscription, ends pending WaitChange
// calls, and closes the client if Open created it.
func (s *Store) Close() error {
	s.notify.close()
	if s.ownsClient {
		return s.rdb.Close()
	}
	return nil
}

// ttlMillis is ttl in whole milliseconds for PX, rounded up: the server may
// hold a lease a little longer than asked, never shorter, and the client
// gives it up earlier still (I5).
func ttlMillis(ttl time.Duration) int64 {
	return int64(math.Ceil(float64(ttl) / float64(time.Millisecond)))
}

// Acquire implements lease.Backend in one script call. A held key is only
// read, never written. The call is idempotent: if go-redis retries it after
// a dropped connection and the first try had granted the lease, the retry
// recognises the lease's ID and returns it, so a retry never turns a grant
// into a false "held" and never grants twice.
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := errors.Join(lease.ValidateKey(key), lease.ValidateOwner(owner), lease.ValidateTTL(ttl)); err != nil {
		return lease.Lease{}, fmt.Errorf("redisstore: acquire: %w", err)
	}
	id := lease.NewID()
	res, err := acquireScript.Run(ctx, s.rdb, s.keyPair(key),
		id.String(), owner, ttlMillis(ttl), tokenLimit).Slice()
	if err != nil {
		return lease.Lease{}, s.fail(ctx, "acquire", key, err)
	}
	r := reply{res: res}
	if r.int(0) == 1 {
		l := lease.Lease{Key: key, Owner: owner, Token: r.token(1), ID: id, TTL: ttl, Expires: r.micros(2)}
		if err := r.err("acquire", key); err != nil {
			return lease.Lease{}, err
		}
		return l, nil
	}
	he := &lease.HeldError{Key: key, Owner: r.str(1), Token: r.token(2), Expires: r.micros(3)}
	if err := r.err("acquire", key); err != nil {
		return lease.Lease{}, err
	}
	return lease.Lease{}, he
}

// Renew implements lease.Backend in one script call.
func (s *Store) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := errors.Join(lease.ValidateLease(l), lease.ValidateTTL(ttl)); err != nil {
		return lease.Lease{}, fmt.Errorf("redisstore: renew: %w", err)
	}
	res, err := renewScript.Run(ctx, s.rdb, []string{s.leaseKey(l.Key)},
		l.ID.String(), uint64(l.Token), ttlMillis(ttl)).Slice()
	if err != nil {
		return lease.Lease{}, s.fail(ctx, "renew", l.Key, err)
	}
	r := reply{res: res}
	if r.int(0) != 1 {
		if err := r.err("renew", l.Key); err != nil {
			return lease.Lease{}, err
		}
		return lease.Lease{}, fmt.Errorf("redisstore: renew %q (token %d): %w", l.Key, l.Token, lease.ErrNotHeld)
	}
	l.Owner, l.TTL, l.Expires = r.str(1), ttl, r.micros(2)
	if err := r.err("renew", l.Key); err != nil {
		return lease.Lease{}, err
	}
	return l, nil
}

// Release implements lease.Backend in one script call, which also publishes
// the key on the store's release channel for WaitChange. If the reply is
// lost and go-redis retries, the retry finds the lease gone and reports
// lease.ErrNotHeld although this call released it; either way the lease is
// no longer held.
func (s *Store) Release(ctx context.Context, l lease.Lease) error {
	if err := lease.ValidateLease(l); err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	n, err := releaseScript.Run(ctx, s.rdb, []string{s.leaseKey(l.Key)},
		l.ID.String(), uint64(l.Token), s.channel, l.Key).Int64()
	if err != nil {
		return s.fail(ctx, "release", l.Key, err)
	}
	if n != 1 {
		return fmt.Errorf("redisstore: release %q (token %d): %w", l.Key, l.Token, lease.ErrNotHeld)
	}
	return nil
}

// Get implements lease.Backend in one read-only script call.
func (s *Store) Get(ctx context.Context, key string) (lease.Lease, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Lease{}, fmt.Errorf("redisstore: get: %w", err)
	}
	res, err := getScript.Run(ctx, s.rdb, []string{s.leaseKey(key)}).Slice()
	if err != nil {
		return lease.Lease{}, s.fail(ctx, "get", key, err)
	}
	l, ok, err := parseGet(key, res)
	if err != nil {
		return lease.Lease{}, err
	}
	if !ok {
		return lease.Lease{}, fmt.Errorf("redisstore: get %q: %w", key, lease.ErrNotFound)
	}
	return l, nil
}

func parseGet(key string, res []any) (lease.Lease, bool, error) {
	r := reply{res: res}
	if r.int(0) != 1 {
		return lease.Lease{}, false, r.err("get", key)
	}
	l := lease.Lease{Key: key, Owner: r.str(1), Token: r.token(2),
		TTL: time.Duration(r.int(3)) * time.Millisecond, Expires: r.micros(4)}
	if err := r.err("get", key); err != nil {
		return lease.Lease{}, false, err
	}
	return l, true, nil
}

// fail wraps an error from the server or the connection. Unless ctx ended
// it matches lease.ErrUnavailable: the outcome of a write is then unknown,
// and the caller must not assume it took effect (nor that it did not).
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("redisstore: %s %q: %w", op, key, err)
	}
	return fmt.Errorf("redisstore: %s %q: %w: %w", op, key, lease.ErrUnavailable, err)
}

// reply reads a script's array reply, remembering the first malformed field.
type reply struct {
	res []any
	bad error
}

func (r *reply) at(i int) any {
	if i >= len(r.res) {
		r.setBad(fmt.Errorf("reply has %d fields, want more than %d", len(r.res), i))
		return nil
	}
	return r.res[i]
}

func (r *reply) setBad(err error) {
	if r.bad == nil {
		r.bad = err
	}
}

func (r *reply) int(i int) int64 {
	switch v := r.at(i).(type) {
	case int64:
		return v
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			r.setBad(fmt.Errorf("reply field %d: %v", i, err))
		}
		return n
	default:
		r.setBad(fmt.Errorf("reply field %d is %T, want an integer", i, v))
		return 0
	}
}

func (r *reply) str(i int) string {
	v, ok := r.at(i).(string)
	if !ok {
		r.setBad(fmt.Errorf("reply field %d is %T, want a string", i, r.at(i)))
	}
	return v
}

func (r *reply) token(i int) lease.Token {
	n := r.int(i)
	if n < 1 || lease.Token(n) > lease.MaxToken {
		r.setBad(fmt.Errorf("reply field %d: token %d outside [1, 2^53]", i, n))
	}
	return lease.Token(n)
}

func (r *reply) micros(i int) time.Time { return time.UnixMicro(r.int(i)) }

// err reports a malformed reply, which means someone else wrote the store's
// keys or the scripts and the server disagree.
func (r *reply) err(op, key string) error {
	if r.bad == nil {
		return nil
	}
	return fmt.Errorf("redisstore: %s %q: unexpected reply %v: %v: %w", op, key, r.res, r.bad, lease.ErrUnavailable)
}

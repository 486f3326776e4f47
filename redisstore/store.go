package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/background"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed want.lua
	wantSrc string
	//go:embed expire.lua
	expireSrc string
	//go:embed floor.lua
	floorSrc string
	//go:embed end.lua
	endSrc string

	// Script.Run sends EVALSHA and falls back to EVAL on NOSCRIPT (after a
	// server restart or SCRIPT FLUSH): one round trip in the steady state.
	acquireScript = redis.NewScript(acquireSrc)
	renewScript   = redis.NewScript(renewSrc)
	releaseScript = redis.NewScript(releaseSrc)
	wantScript    = redis.NewScript(wantSrc)
	expireScript  = redis.NewScript(expireSrc)
	floorScript   = redis.NewScript(floorSrc)
	endScript     = redis.NewScript(endSrc)
)

// tokenLimit bounds the tokens the store issues: below 2^53, so that the Lua
// scripts (whose numbers are doubles) compare them exactly and every token
// stays within lease.MaxToken. acquire.lua holds it as a literal (one
// argument fewer to send and convert per grant); a test keeps the two equal.
const tokenLimit = uint64(lease.MaxToken)

// DefaultNamespace is the prefix of every key name the store uses, unless
// WithNamespace sets another.
const DefaultNamespace = "lease"

// Store is a lease.Backend on Redis. It is safe for concurrent use.
type Store struct {
	rdb        redis.UniversalClient
	ownsClient bool
	ns         string
	storeID    string // StoreID's, read by New
	id         string // the random id in it, as NS:store-id holds it
	cluster    bool   // a *redis.ClusterClient: one token floor per hash slot
	channel    string
	channelArg any // channel, boxed once for every Release
	changesArg any // the changes channel (watch.go), boxed once
	aofArg     any // "1": acquire.lua refuses to grant while the AOF is off (checked durable), else "0"
	idArg      any // id: every grant checks that the namespace still has it (wiped.go); "" under AllowVolatile

	// wiped is set when a grant found the namespace wiped (wiped.go):
	// every later operation's answer. beforeCopy, for tests, runs in
	// mendStoreID between its first check and the copy's write.
	wiped        atomic.Pointer[error]
	beforeCopy   func()
	beforeFloors func() // for tests: runs in Bump before it raises the floors

	// volatile is the refusal of every grant while the last re-check of
	// the persistence settings found them volatile (recheck.go), or nil.
	volatile atomic.Pointer[error]

	notify *notifier
	watch  watcher
	batch  *batcher

	// bg runs the acquire scripts that outlive their callers, the
	// releases of what they grant (settle.go) and the re-checks of the
	// persistence settings (recheck.go); Close ends it.
	bg *background.Group

	closeOnce sync.Once
	closeErr  error
}

var (
	_ lease.Backend      = (*Store)(nil)
	_ lease.Notifier     = (*Store)(nil)
	_ lease.BatchRenewer = (*Store)(nil)
	_ io.Closer          = (*Store)(nil)
)

// Option configures a Store.
type Option func(*config) error

type config struct {
	ns            string
	allowVolatile bool // AllowVolatile: a volatile server is served
	assumeDurable bool // AssumeDurable: the persistence check is skipped

	// For tests (export_test.go): the period of the re-checks (0:
	// recheckEvery), and a check to run instead of checkDurable's.
	recheckEvery time.Duration
	recheck      func(context.Context) error
}

// AllowVolatile lets the store run on a server that cannot keep tokens
// rising across a restart (appendonly no, appendfsync other than always, an
// eviction policy, or settings that cannot be read). Without it such a
// server is refused with ErrVolatile (I7). With it, a restart of a server
// without persistence starts every key's tokens again at 1, and a guard that
// has seen the old tokens rejects the new holders' writes — or, worse, a
// guard that lost its state too accepts a stale writer's. Such a Store also
// goes on serving a namespace wiped under it, where one without the option
// refuses (doc.go, Wipes), and neither reads the settings again while it
// runs nor refuses grants when they change.
func AllowVolatile() Option {
	return func(c *config) error { c.allowVolatile = true; return nil }
}

// AssumeDurable skips the persistence check for servers that hide their
// configuration (CONFIG renamed or forbidden, as some managed services do):
// the caller vouches that the server runs with appendonly yes and appendfsync
// always, and does not evict keys, then and for as long as the Store runs:
// nothing is checked while it runs either (neither the re-checks nor the
// grant script's appendonly check of doc.go, Persistence).
func AssumeDurable() Option {
	return func(c *config) error { c.assumeDurable = true; return nil }
}

// WithNamespace sets the prefix of the store's key names and release channel
// (default DefaultNamespace), so that several independent stores can share a
// server. It must be 1 to 64 bytes without braces or control characters.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if err := validateNamespace(ns); err != nil {
			return fmt.Errorf("%w: redisstore: %v", lease.ErrInvalid, err)
		}
		c.ns = ns
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
	s, err := newStore(ctx, c, opts)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s.ownsClient = true
	return s, nil
}

// New returns a Store on client, which may be a *redis.Client, a
// *redis.ClusterClient or a failover client; Close leaves it open. A
// *redis.Ring is refused with an error matching lease.ErrInvalid, whatever
// the options: it moves keys between shards when one is marked down, which
// loses leases and token counters.
//
// New checks every node it can reach with CONFIG GET and refuses, with an
// error matching ErrVolatile that names the settings and how to fix them, a
// server that runs without appendonly yes and appendfsync always, with
// no-appendfsync-on-rewrite yes, or with a memory limit and an eviction
// policy other than noeviction — unless AllowVolatile or AssumeDurable is
// given. The check has 10 s to answer (Open's takes the context it is
// given), as etcdstore.New's has. A server that cannot be reached gives an
// error matching lease.ErrUnavailable. The Store then reads the settings
// again every second while it runs, over one connection of its own to each
// node made with client's options, and refuses grants while they are
// volatile (doc.go, Persistence).
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), newTimeout)
	defer cancel()
	return newStore(ctx, client, opts)
}

// newTimeout bounds New's persistence check.
const newTimeout = 10 * time.Second

func newStore(ctx context.Context, client redis.UniversalClient, opts []Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore: client is nil", lease.ErrInvalid)
	}
	if _, ok := client.(*redis.Ring); ok {
		// A Ring rehashes keys onto the other shards whenever its heartbeat
		// marks one down, where neither the lease nor the token counter is:
		// a second holder, and tokens issued again (I1, I3), however durable
		// each shard. It also sends the persistence check, List's SCAN and
		// the release subscription to one shard each, not to all.
		return nil, fmt.Errorf("%w: redisstore: a *redis.Ring is not supported: it moves keys to other shards when one is marked down, "+
			"losing leases and token counters; use a *redis.Client (one durable master) or a *redis.ClusterClient", lease.ErrInvalid)
	}
	cfg := config{ns: DefaultNamespace}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: redisstore: nil option", lease.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	s := &Store{rdb: client, ns: cfg.ns}
	_, s.cluster = client.(*redis.ClusterClient)
	s.channel = s.ns + channelSuffix
	s.channelArg = s.channel
	s.changesArg = s.ns + changesSuffix
	s.aofArg = "0"
	if !cfg.allowVolatile && !cfg.assumeDurable {
		if err := checkDurable(ctx, client, false); err != nil {
			return nil, err
		}
		s.aofArg = "1"
	}
	if err := s.readStoreID(ctx); err != nil {
		return nil, err
	}
	s.idArg = s.id
	if cfg.allowVolatile {
		// A volatile server's restart empties it, and its caller has
		// accepted tokens from 1 again then: the Store goes on serving.
		s.idArg = ""
	}
	s.notify = newNotifier(s)
	s.batch = newBatcher(client)
	s.bg = background.New()
	if s.aofArg == "1" {
		every, check, own := recheckEvery, cfg.recheck, io.Closer(nil)
		if cfg.recheckEvery > 0 {
			every = cfg.recheckEvery
		}
		if check == nil {
			c := client
			if rc := recheckClient(client); rc != nil {
				c, own = rc, rc
			}
			check = func(ctx context.Context) error { return checkDurable(ctx, c, true) }
		}
		s.bg.Go(func(life context.Context) { s.recheck(life, every, check, own) })
	}
	return s, nil
}

// StoreID names the leases the Store serves: "redis:", the namespace
// path-escaped (its SHA-256 when too long), ":" and a random id of 32 hex
// digits kept in the key NS:store-id, which the first Store on the
// namespace sets (SET NX: Stores starting at once agree on the first) and
// every later one reads. Two Stores with the same StoreID serve the same
// leases; another server, database or namespace has its own id. The id is
// data, so an AOF or RDB copied to a new server keeps it, and a wipe of the
// namespace takes it: a Store that finds its id gone or changed under it
// refuses from then on, and a Store made after the wipe sets a new one
// (doc.go, Wipes). lease serve sends it to clients (leasehttp WithStoreID),
// so that a client listing several replicas finds one configured with
// another --backend. It is printable ASCII without spaces, at most 128
// bytes.
func (s *Store) StoreID() string { return s.storeID }

// readStoreID reads the namespace's store id, setting a new one if there
// is none, and sets s.storeID.
func (s *Store) readStoreID(ctx context.Context) error {
	k := s.ns + storeIDSuffix
	if err := s.rdb.SetNX(ctx, k, lease.NewID().Reveal(), 0).Err(); err != nil {
		return fmt.Errorf("%w: redisstore: writing the store id %s: %v", lease.ErrUnavailable, k, err)
	}
	id, err := s.rdb.Get(ctx, k).Result()
	if err != nil {
		return fmt.Errorf("%w: redisstore: reading the store id %s: %v", lease.ErrUnavailable, k, err)
	}
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: redisstore: the store id at %s is not 32 hex digits", lease.ErrUnavailable, k)
	}
	p := url.PathEscape(s.ns)
	if len(p) > 128-len("redis:")-1-32 {
		p = fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(s.ns)))[:48]
	}
	s.id = id
	s.storeID = "redis:" + p + ":" + id
	return nil
}

// Close stops the store's release subscription and its re-checks of the
// persistence settings (at once, closing the re-checks' own connections
// under a check in flight, even one on a silent link), ends pending
// WaitChange calls, and closes the client if Open created it. Close is
// idempotent, as the other stores' are: a second Close returns the first
// one's error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.notify.close()
		s.closeWatch()
		s.bg.Close()
		s.batch.wait()
		if s.ownsClient {
			s.closeErr = s.rdb.Close()
		}
	})
	return s.closeErr
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
// finds the lease carrying this call's ID and returns it, so a retry never
// turns a grant into a false "held" and never grants twice. ctx does not
// cut the call short (settle.go): when it ends first, Acquire returns its
// error at once and the store releases what the call grants.
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return lease.Lease{}, fmt.Errorf("redisstore: acquire: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return lease.Lease{}, fmt.Errorf("redisstore: acquire %q: %w", key, err)
	}
	if err := s.refused(); err != nil {
		return lease.Lease{}, err
	}
	if err := s.grantRefused(); err != nil {
		return lease.Lease{}, fmt.Errorf("redisstore: acquire %q: %w", key, err)
	}
	id := lease.NewID()
	ids := id.Reveal()
	ms := ttlMillis(ttl)
	var res string
	for try := 1; ; try++ {
		var err error
		res, err = s.acquireOnce(ctx, key, ids, owner, ms, ttl)
		var r *idRefused
		if !errors.As(err, &r) {
			if err != nil {
				return lease.Lease{}, err
			}
			break
		}
		// A grant that found the store id (its slot's copy, on Cluster)
		// not the Store's: it wrote nothing (wiped.go).
		if try == mendTries {
			return lease.Lease{}, fmt.Errorf("redisstore: acquire %q: %w: the hash slot's copy of the store id changed under %d grants: %w", key, lease.ErrUnavailable, try, err)
		}
		if err := s.mendStoreID(ctx, key, r); err != nil {
			return lease.Lease{}, err
		}
	}
	v, err := parseValue(res)
	if err != nil {
		return lease.Lease{}, s.malformed("acquire", key, err)
	}
	if v.id != ids {
		return lease.Lease{}, &lease.HeldError{Key: key, Owner: v.owner, Token: v.token, Expires: v.expires}
	}
	if v.owner != owner || v.ttl != time.Duration(ms)*time.Millisecond {
		return lease.Lease{}, s.malformed("acquire", key, fmt.Errorf("lease value %q has our id but not our owner and ttl", res))
	}
	return lease.Lease{Key: key, Owner: owner, Token: v.token, ID: id, TTL: ttl, Expires: v.expires}, nil
}

// Renew implements lease.Backend in one script call.
func (s *Store) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := errors.Join(lease.ValidateLease(l), lease.ValidateTTL(ttl)); err != nil {
		return lease.Lease{}, fmt.Errorf("redisstore: renew: %w", err)
	}
	if err := s.refused(); err != nil {
		return lease.Lease{}, err
	}
	r, err := s.renewed(ctx, l, ttl, s.batch.run(ctx, renewScript, []string{s.leaseKey(l.Key)}, proof(l), ttlMillis(ttl), s.changesArg))
	if errors.Is(err, lease.ErrNotHeld) {
		s.lostCheck(ctx, "renewing", l.Key)
	}
	return r, err
}

// lostCheck reads the store id once doing (renewing, releasing) found the
// lease of key gone, which a wipe of the namespace does too (wiped.go):
// if it was wiped, the Store refuses from now on and its watches end. The
// call that found the lease gone answers lease.ErrNotHeld all the same,
// which is true. One GET, on this path only.
func (s *Store) lostCheck(ctx context.Context, doing, key string) {
	_, _ = s.checkStoreID(ctx, fmt.Sprintf("%s %q, whose lease was gone", doing, key))
}

// renewed reads cmd, the reply of renew.lua to renewing l for ttl.
func (s *Store) renewed(ctx context.Context, l lease.Lease, ttl time.Duration, cmd *redis.Cmd) (lease.Lease, error) {
	res, err := cmd.Text()
	if errors.Is(err, redis.Nil) {
		return lease.Lease{}, fmt.Errorf("redisstore: renew %q (token %d): %w", l.Key, l.Token, lease.ErrNotHeld)
	}
	if err != nil {
		return lease.Lease{}, s.fail(ctx, "renew", l.Key, err)
	}
	v, err := parseValue(res)
	if err != nil {
		return lease.Lease{}, s.malformed("renew", l.Key, err)
	}
	if v.id != l.ID.Reveal() || v.token != l.Token {
		return lease.Lease{}, s.malformed("renew", l.Key, fmt.Errorf("renewed lease value %q is not the lease renewed", res))
	}
	l.Owner, l.TTL, l.Expires = v.owner, ttl, v.expires
	return l, nil
}

// RenewBatch implements lease.BatchRenewer: one pipeline of renew.lua
// calls, one per renewal (each script atomic by itself; on Cluster, one
// pipeline per master), so a batch costs one round trip. A renewal the
// server fails (its lease value malformed, say) fails the batch.
func (s *Store) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, fmt.Errorf("redisstore: renew: %w", err)
	}
	if err := s.refused(); err != nil {
		return nil, err
	}
	calls := make([]*call, len(renewals))
	for i, r := range renewals {
		calls[i] = &call{ctx: ctx, script: renewScript, keys: []string{s.leaseKey(r.Lease.Key)},
			args: []any{proof(r.Lease), ttlMillis(r.TTL), s.changesArg}, ready: make(chan struct{})}
	}
	s.batch.exec(calls)
	out := make([]lease.RenewResult, len(renewals))
	lost := ""
	for i, r := range renewals {
		l, err := s.renewed(ctx, r.Lease, r.TTL, calls[i].cmd)
		if err != nil && !errors.Is(err, lease.ErrNotHeld) {
			return nil, err
		}
		if err != nil && lost == "" {
			lost = r.Lease.Key
		}
		out[i] = lease.RenewResult{Lease: l, Err: err}
	}
	if lost != "" {
		s.lostCheck(ctx, "renewing", lost) // once a batch
	}
	return out, nil
}

// Release implements lease.Backend in one script call, which also publishes
// the key on the store's release channel if a WaitChange asked for it. If
// the reply is lost and go-redis retries, the retry finds the lease gone and
// reports lease.ErrNotHeld although this call released it; either way the
// lease is no longer held.
func (s *Store) Release(ctx context.Context, l lease.Lease) error {
	if err := lease.ValidateLease(l); err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	if err := s.refused(); err != nil {
		return err
	}
	n, err := s.batch.run(ctx, releaseScript, []string{s.leaseKey(l.Key)}, proof(l), s.channelArg, l.Key, s.changesArg).Int64()
	if err != nil {
		return s.fail(ctx, "release", l.Key, err)
	}
	if n != 1 {
		s.lostCheck(ctx, "releasing", l.Key)
		return fmt.Errorf("redisstore: release %q (token %d): %w", l.Key, l.Token, lease.ErrNotHeld)
	}
	return nil
}

// Get implements lease.Backend with one GET.
func (s *Store) Get(ctx context.Context, key string) (lease.Lease, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Lease{}, fmt.Errorf("redisstore: get: %w", err)
	}
	if err := s.refused(); err != nil {
		return lease.Lease{}, err
	}
	res, err := s.rdb.Get(ctx, s.leaseKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return lease.Lease{}, fmt.Errorf("redisstore: get %q: %w", key, lease.ErrNotFound)
	}
	if err != nil {
		return lease.Lease{}, s.fail(ctx, "get", key, err)
	}
	v, err := parseValue(res)
	if err != nil {
		return lease.Lease{}, s.malformed("get", key, err)
	}
	return v.lease(key), nil
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

// malformed reports a reply the store's scripts cannot have sent, which
// means someone else wrote the store's keys or the scripts and the server
// disagree.
func (s *Store) malformed(op, key string, err error) error {
	return fmt.Errorf("redisstore: %s %q: unexpected reply: %v: %w", op, key, err, lease.ErrUnavailable)
}

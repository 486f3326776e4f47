package etcdstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/background"
)

// ErrRevisionBehind means the cluster's revision is lower than a token this
// prefix has already issued: its history was rewound (a snapshot restored
// without --bump-revision, or the keys copied to a new cluster). Tokens
// issued now could repeat old ones (I1), so the Store refuses to serve
// (I7). It matches lease.ErrUnavailable.
var ErrRevisionBehind = fmt.Errorf("%w: etcdstore: the cluster's revision is behind tokens already issued", lease.ErrUnavailable)

// DefaultPrefix is the key prefix used without WithPrefix.
const DefaultPrefix = "lease/"

// Store is a lease.Backend, lease.WaitAcquirer and lease.Watcher on etcd. It
// is safe for concurrent use. See the package documentation for the model.
type Store struct {
	cli     *clientv3.Client
	owned   bool // cli was made by Open and is closed by Close
	prefix  string
	storeID string // StoreID's: the prefix and the store's id key, read by New

	// maxRev is the highest revision seen in a response. A later response
	// with a lower one means the cluster's history was rewound.
	maxRev atomic.Int64
	broken atomic.Pointer[error]
	// stopped is closed when broken is set (stop): the Store's watches
	// end with it.
	stopped     chan struct{}
	idKey       string       // the prefix's store id key
	idValue     string       // the random id it held when New read it (wiped.go)
	idCheckNext atomic.Int64 // unix ns after which a silent watch reads the store id again
	hwNext      atomic.Int64 // unix ns after which the next acquisition raises the high-water mark
	// progressNext is the unix ns after which a silent watch asks etcd for
	// progress again (requestProgress).
	progressNext atomic.Int64

	batch *batcher          // group commit of the transactions of Acquire, AcquireWait, Renew and Release
	bg    *background.Group // revocations retried until etcd can be reached (revokeSurely)

	mu        sync.Mutex
	pool      map[int64][]*etcdLease // idle etcd leases with no keys, by TTL in seconds
	held      map[lease.ID]*etcdLease
	lastSweep time.Time
	closed    bool

	// For tests: called before each keep-alive is sent; an error fails the
	// keep-alive with it instead.
	beforeKeepAlive func(clientv3.LeaseID) error
}

var (
	_ lease.Backend      = (*Store)(nil)
	_ lease.WaitAcquirer = (*Store)(nil)
)

// Option configures a Store.
type Option func(*config) error

type config struct {
	prefix string
}

// WithPrefix sets the prefix under which the Store keeps its etcd keys
// (default DefaultPrefix). It must be non-empty, end with "/", and contain
// no control characters. Stores with different prefixes never see each
// other's keys, even when one prefix starts with the other.
func WithPrefix(p string) Option {
	return func(c *config) error {
		if p == "" || !strings.HasSuffix(p, "/") {
			return fmt.Errorf("%w: etcdstore: prefix %q must be non-empty and end with \"/\"", lease.ErrInvalid, p)
		}
		if err := lease.ValidateKey(p); err != nil {
			return fmt.Errorf("etcdstore: prefix: %w", err)
		}
		c.prefix = p
		return nil
	}
}

// The keep-alive of the connections Open makes: while a request or stream
// is in flight on a connection, a ping after keepAliveTime without traffic,
// and the connection closed when its answer has not come within
// keepAliveTimeout. An idle connection is not pinged: etcd's servers
// refuse that (gRPC's PermitWithoutStream is false in their keep-alive
// policy; the third ping within two hours on a connection with nothing in
// flight closes it with GOAWAY "too_many_pings", and the client doubles its
// ping interval each time). A member whose link went silent while idle is
// found by the first request sent there, within keepAliveTime plus
// keepAliveTimeout.
const (
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = 5 * time.Second
)

// Open connects to the etcd cluster at endpoints and returns a Store that
// owns the connection (Close closes it). Its connections ping a member
// after 10 s without traffic while a request is in flight, and drop one
// that does not answer within 5 s, so that a member whose link drops
// everything is left for the others
// (New's client keeps its own settings). Like New it refuses a cluster
// whose revision is behind the tokens already issued (ErrRevisionBehind).
func Open(ctx context.Context, endpoints []string, opts ...Option) (*Store, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: etcdstore: no endpoints", lease.ErrInvalid)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		// A member whose link drops everything without closing would
		// otherwise keep its connection READY for good, and every request
		// the balancer sends there would wait for its deadline. etcd
		// refuses pings more often than every 5 s (--grpc-keepalive-min-time),
		// and any on a connection with nothing in flight (see keepAliveTime).
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		PermitWithoutStream:  false,
		Context:              context.WithoutCancel(ctx),
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: etcdstore: connecting to %v: %v", lease.ErrUnavailable, endpoints, err)
	}
	s, err := newStore(ctx, cli, true, opts)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	return s, nil
}

// New returns a Store on an existing client, which stays the caller's to
// close (after the Store). It reads and raises the prefix's high-water mark
// with a 10 s timeout and refuses a cluster whose revision is behind it
// (ErrRevisionBehind).
func New(cli *clientv3.Client, opts ...Option) (*Store, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcdstore: client is nil", lease.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(cli.Ctx(), 10*time.Second)
	defer cancel()
	return newStore(ctx, cli, false, opts)
}

func newStore(ctx context.Context, cli *clientv3.Client, owned bool, opts []Option) (*Store, error) {
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: etcdstore: nil option", lease.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	s := &Store{
		cli:     cli,
		owned:   owned,
		prefix:  cfg.prefix,
		stopped: make(chan struct{}),
		batch:   newBatcher(cli),
		bg:      background.New(),
		pool:    make(map[int64][]*etcdLease),
		held:    make(map[lease.ID]*etcdLease),
	}
	if err := s.checkLayout(ctx); err != nil {
		s.bg.Close()
		return nil, err
	}
	if err := s.checkHighWater(ctx); err != nil {
		s.bg.Close()
		return nil, err
	}
	if err := s.readStoreID(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// checkLayout refuses a prefix that holds keys of the layout before
// entries: a Store of this version would not see the leases they hold.
func (s *Store) checkLayout(ctx context.Context) error {
	for _, kind := range []byte{kindOldHolder, kindOldWaiter} {
		resp, err := s.cli.Get(ctx, s.path(kind, ""), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		if err != nil {
			return fmt.Errorf("%w: etcdstore: reading the prefix: %v", lease.ErrUnavailable, err)
		}
		if len(resp.Kvs) > 0 {
			return fmt.Errorf("%w: etcdstore: prefix %q holds leases of an earlier etcdstore layout (key %q); let them expire or release them with that version, or use another prefix", lease.ErrUnavailable, s.prefix, resp.Kvs[0].Key)
		}
	}
	return nil
}

// StoreID names the leases the Store serves: the prefix, and a random id
// the first Store on the prefix writes under it, which every later one
// reads. Two Stores with the same StoreID serve the same leases; a Store
// with another prefix, or on another cluster, serves others, though its
// keys may have the same names. The id is data in etcd, so a snapshot
// restored (with --bump-revision, ETCD.md) keeps it: the store is the same,
// though the cluster is new. lease serve sends it to clients (leasehttp
// WithStoreID), so that a client listing several replicas finds one
// configured with another --backend. It is printable ASCII without
// spaces, at most 128 bytes: "etcd:", the prefix path-escaped (its
// SHA-256 when that would be too long), ":" and the id's 32 hex digits.
func (s *Store) StoreID() string { return s.storeID }

// readStoreID reads the prefix's store id, writing a new one if there is
// none (Stores starting at once on a new prefix agree on the first
// written), and sets s.storeID.
func (s *Store) readStoreID(ctx context.Context) error {
	k := s.path(kindMeta, "store-id")
	_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, lease.NewID().Reveal())).Commit()
	if err != nil {
		return fmt.Errorf("%w: etcdstore: writing the store id: %v", lease.ErrUnavailable, err)
	}
	resp, err := s.cli.Get(ctx, k)
	if err != nil {
		return fmt.Errorf("%w: etcdstore: reading the store id: %v", lease.ErrUnavailable, err)
	}
	kvs := resp.Kvs
	if len(kvs) != 1 || len(kvs[0].Value) != 32 || strings.Trim(string(kvs[0].Value), "0123456789abcdef") != "" {
		return fmt.Errorf("%w: etcdstore: the store id at %q is not 32 hex digits", lease.ErrUnavailable, k)
	}
	p := url.PathEscape(s.prefix)
	if len(p) > 128-len("etcd:")-1-32 {
		p = fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(s.prefix)))[:48]
	}
	s.storeID = "etcd:" + p + ":" + string(kvs[0].Value)
	s.idKey, s.idValue = k, string(kvs[0].Value)
	return nil
}

// Close revokes the idle etcd leases the Store keeps for reuse and, if Open
// made the client, closes it. Leases still held stay in etcd until they are
// released or expire.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.bg.Close() // the retried revocations are abandoned: those generations expire by themselves
	s.mu.Lock()
	var idle []*etcdLease
	for _, l := range s.pool {
		idle = append(idle, l...)
	}
	s.pool = nil
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, el := range idle {
		if _, err := s.cli.Revoke(ctx, el.id); err != nil {
			break // unreachable: they expire on their own
		}
	}
	if s.owned {
		return s.cli.Close()
	}
	return nil
}

// Key kinds, each its own namespace under the prefix.
const (
	// kindEntry: a lease key's entries, one per holder or waiter, each
	// attached to its etcd lease (see firstKey and entryKey for names).
	// The entry with the oldest create revision is the holder; its create
	// revision is the token.
	kindEntry = 'e'
	kindMeta  = 'm' // the high-water mark, the store id
	// kindReleased marks a release: written with the holder's entry's
	// delete, so that a watch tells a release from an expiry (watch.go).
	kindReleased = 'r'
	// Kinds of the layout before entries (a holder key 'h' and a queue
	// 'w' per lease key); New refuses a prefix that still has them.
	kindOldHolder = 'h'
	kindOldWaiter = 'w'
)

// firstKey is the etcd key of an entry created when key has none (an
// Acquire, or an AcquireWait that holds at once): one fixed name, as no
// other entry of key exists then. A key acquired and released without
// contention thus always writes the same etcd key. (A name per generation
// would leave a deleted key in etcd's index per acquisition until the next
// compaction, and every comparison over a key's entries would walk them
// all.)
func (s *Store) firstKey(key string) string { return s.path(kindEntry, key, "0") }

// entryKey is the etcd key of a waiter's entry under lease key key, created
// on etcd lease el while key has other entries: its name is el's ID in hex
// (16 digits, never "0"). Entries of one key that exist at once are on
// distinct etcd leases, so their names differ; and as etcd leases are
// pooled and reused, a contended key reuses a few names. An entry moved to
// another etcd lease (Renew with another TTL) keeps its name, and the etcd
// lease it leaves is revoked, never pooled, so no new entry can take the
// name.
func (s *Store) entryKey(key string, el clientv3.LeaseID) string {
	return s.path(kindEntry, key, fmt.Sprintf("%016x", int64(el)))
}

// entries is the range (a prefix) of key's entries.
func (s *Store) entries(key string) string { return s.path(kindEntry, key, "") }

// leaseKeyOf returns the lease key of entry k (an etcd key under
// path(kindEntry, "")), and false for any other key.
func (s *Store) leaseKeyOf(k []byte) (string, bool) {
	base := s.path(kindEntry, "")
	if len(k) <= len(base) || string(k[:len(base)]) != base {
		return "", false
	}
	rest := k[len(base):]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return "", false
	}
	return string(rest[:i]), true
}

// path builds every etcd key the Store uses: prefix, kind, NUL, key, and for
// waiters NUL and the waiter's name. Lease keys and prefixes contain no
// control characters, so the NULs make namespaces disjoint: no key of one
// kind, lease key or prefix is a prefix of another's (unlike etcd issue
// #6278). path(kind, k, "") is the range of all sub-keys of k.
func (s *Store) path(kind byte, key string, sub ...string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + 2 + len(key) + 24)
	b.WriteString(s.prefix)
	b.WriteByte(kind)
	b.WriteByte(0)
	b.WriteString(key)
	for _, p := range sub {
		b.WriteByte(0)
		b.WriteString(p)
	}
	return b.String()
}

// stop makes err the answer of every later operation, unless the Store
// stopped already, ends its watches, and returns the error that stopped it.
func (s *Store) stop(err error) error {
	if s.broken.CompareAndSwap(nil, &err) {
		close(s.stopped)
	}
	return *s.broken.Load()
}

// usable returns the error that stopped the Store, if any.
func (s *Store) usable() error {
	if p := s.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// observe checks a response's revision against the highest one seen by a
// call that finished before this one started (floor): under linearizable
// reads and writes it can only be lower if the cluster's history was
// rewound, and then the Store stops serving.
func (s *Store) observe(floor int64, h *pb.ResponseHeader) error {
	if h == nil {
		return nil
	}
	rev := h.Revision
	if rev < floor {
		return s.stop(fmt.Errorf("%w: revision %d seen after %d; was a snapshot restored without --bump-revision? (docs/ETCD.md)", ErrRevisionBehind, rev, floor))
	}
	for {
		cur := s.maxRev.Load()
		if rev <= cur || s.maxRev.CompareAndSwap(cur, rev) {
			return nil
		}
	}
}

// revDigits is the width of revisions stored as values: zero-padded so that
// etcd's byte-wise value comparison orders them numerically.
const revDigits = 20

func formatRev(r int64) string {
	s := strconv.FormatInt(r, 10)
	return strings.Repeat("0", revDigits-len(s)) + s
}

// highWaterKey is where the highest revision known to be issued under the
// prefix is kept: raised at New/Open and by every acquisition.
func (s *Store) highWaterKey() string { return s.path(kindMeta, "high-water") }

// checkHighWater refuses a cluster whose revision is behind the stored
// high-water mark, and raises the mark to the current revision.
func (s *Store) checkHighWater(ctx context.Context) error {
	k := s.highWaterKey()
	resp, err := s.cli.Get(ctx, k)
	if err != nil {
		return fmt.Errorf("%w: etcdstore: reading the high-water mark: %v", lease.ErrUnavailable, err)
	}
	cur := resp.Header.Revision
	var stored int64
	if len(resp.Kvs) == 1 {
		stored, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		if err != nil || stored < 0 {
			return fmt.Errorf("%w: etcdstore: high-water mark %q at %q is not a revision", lease.ErrUnavailable, resp.Kvs[0].Value, k)
		}
	}
	if stored > cur {
		return fmt.Errorf("%w: tokens up to %d were issued under %q but the cluster is at revision %d; restore with `etcdutl snapshot restore --bump-revision N --mark-compacted` (N above the revisions lost), see docs/ETCD.md", ErrRevisionBehind, stored, s.prefix, cur)
	}
	if cur > int64(lease.MaxToken) {
		return fmt.Errorf("%w: etcdstore: the cluster's revision %d is above 2^53, the largest token", lease.ErrUnavailable, cur)
	}
	s.maxRev.Store(cur)
	// Raise the mark unless someone raised it further meanwhile.
	var cmp clientv3.Cmp
	if len(resp.Kvs) == 1 {
		cmp = clientv3.Compare(clientv3.ModRevision(k), "=", resp.Kvs[0].ModRevision)
	} else {
		cmp = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
	}
	if _, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(k, formatRev(cur))).Commit(); err != nil {
		return fmt.Errorf("%w: etcdstore: writing the high-water mark: %v", lease.ErrUnavailable, err)
	}
	return nil
}

// highWaterEvery is how often acquisitions raise the high-water mark. Every
// one could, but that would double the keys an acquisition writes; the mark
// is a lower bound of the tokens issued either way.
const highWaterEvery = time.Second

// highWaterDue returns, at most once per highWaterEvery, the part of an
// acquisition's transaction that raises the high-water mark to rev, a
// revision already seen (so a lower bound of the token being issued).
func (s *Store) highWaterDue(rev int64) (clientv3.Op, bool) {
	now := time.Now().UnixNano()
	next := s.hwNext.Load()
	if now < next || !s.hwNext.CompareAndSwap(next, now+int64(highWaterEvery)) {
		return clientv3.Op{}, false
	}
	return s.raiseHighWater(rev), true
}

// raiseHighWater raises the high-water mark to rev; it never lowers it.
func (s *Store) raiseHighWater(rev int64) clientv3.Op {
	k, v := s.highWaterKey(), formatRev(rev)
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), "<", v)},
		[]clientv3.Op{clientv3.OpPut(k, v)}, nil)
}

// fail wraps an error from etcd: ctx's end if that caused it, otherwise
// ErrUnavailable. Either way the outcome may be unknown.
func fail(ctx context.Context, op, key string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: etcdstore: %s %q: %w", lease.ErrUnavailable, op, key, context.Cause(ctx))
	}
	if errors.Is(err, lease.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: etcdstore: %s %q: %v", lease.ErrUnavailable, op, key, err)
}

// failUnknown is fail for a write whose outcome is unknown: it says so.
func failUnknown(ctx context.Context, op, key string, err error) error {
	if errors.Is(err, errNotSent) {
		return fmt.Errorf("%w: etcdstore: %s %q: not sent: %w", lease.ErrUnavailable, op, key, context.Cause(ctx))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: etcdstore: %s %q (whether it took effect is unknown): %w", lease.ErrUnavailable, op, key, context.Cause(ctx))
	}
	if errors.Is(err, lease.ErrUnavailable) {
		return err
	}
	var be *errBatch
	if errors.As(err, &be) { // says so already
		return fmt.Errorf("%w: etcdstore: %s %q: %v", lease.ErrUnavailable, op, key, err)
	}
	return fmt.Errorf("%w: etcdstore: %s %q (whether it took effect is unknown): %v", lease.ErrUnavailable, op, key, err)
}

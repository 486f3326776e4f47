package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/background"
)

// Store is a lease.Backend on PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	owned  bool // Close closes pool
	schema string
	n      names
	q      queries

	volatile bool // AllowVolatile: the durability check is skipped
	prepMu   sync.Mutex
	prep     *preparation // the preparation of the tables running, if any (ensureSchema)
	schemaOK atomic.Bool
	closed   atomic.Bool
	prefix   string                   // the table prefix, for StoreID
	ident    atomic.Pointer[identity] // the tables' store id, set by their first preparation
	replaced atomic.Pointer[error]    // set when the tables were found dropped and made anew (replaced.go)

	notify *notifier
	watch  watcher // Watch's listener (watch.go)

	// bg settles the acquisitions whose callers left or whose answers
	// were lost (settle.go); Close ends it.
	bg *background.Group
	// acquireBound is acquireBound, shorter in tests.
	acquireBound time.Duration

	acquires *batcher[acquireReq, lease.Lease]
	renews   *batcher[renewReq, lease.Lease]
	releases *batcher[lease.Lease, struct{}]
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
	schema   string
	prefix   string
	volatile bool // AllowVolatile: skip the durability check
}

// DefaultSchema and DefaultTablePrefix name the tables when no option says
// otherwise: public.lease_leases and public.lease_meta.
const (
	DefaultSchema      = "public"
	DefaultTablePrefix = "lease_"
)

// WithSchema puts the tables in the PostgreSQL schema name (created if it
// does not exist). Any name is allowed; it is quoted, not interpreted.
func WithSchema(name string) Option {
	return func(c *config) error {
		if err := checkIdent("schema", name); err != nil {
			return err
		}
		c.schema = name
		return nil
	}
}

// AllowVolatile lets the Store serve on a server whose settings cannot keep
// a committed grant through a crash of its machine (fsync or
// full_page_writes off; see the package documentation). Tokens can then go
// backwards after such a crash: for tests and throwaway databases only.
func AllowVolatile() Option {
	return func(c *config) error {
		c.volatile = true
		return nil
	}
}

// WithTablePrefix starts the tables' names with p: p+"leases" and p+"meta".
// The empty prefix is allowed.
func WithTablePrefix(p string) Option {
	return func(c *config) error {
		if p != "" {
			if err := checkIdent("table prefix", p+"leases"); err != nil {
				return err
			}
		}
		c.prefix = p
		return nil
	}
}

// Open connects a pool to connString (a pgx connection string; pool settings
// such as pool_max_conns go in it too), creates or checks the tables and
// returns a Store that owns the pool.
func Open(ctx context.Context, connString string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// The caller's mistake, not an unreachable server: retrying cannot
		// help.
		return nil, invalidf("%v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w: %w", lease.ErrUnavailable, err)
	}
	s, err := New(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.owned = true
	if err := s.ensureSchema(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// New returns a Store using pool, which stays the caller's: Close does not
// close it. The tables are created or checked on first use.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, invalidf("pool is nil")
	}
	cfg := config{schema: DefaultSchema, prefix: DefaultTablePrefix}
	for _, opt := range opts {
		if opt == nil {
			return nil, invalidf("nil option")
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	n, err := newNames(cfg.schema, cfg.prefix)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, schema: cfg.schema, prefix: cfg.prefix, n: n, q: newQueries(n, true, checkedSettings(cfg.volatile)), volatile: cfg.volatile}
	s.notify = newNotifier(s)
	s.bg = background.New()
	s.acquireBound = acquireBound
	s.acquires = newBatcher(loneSlots, maxBatch, s.execAcquire)
	s.acquires.detached, s.acquires.orphaned = s.acquireContext, s.orphaned
	s.renews = newBatcher(loneSlots, maxBatch, s.execRenew)
	s.releases = newBatcher(loneSlots, maxBatch, s.execRelease)
	return s, nil
}

// StoreID names the leases the Store serves: "postgres:", the schema and
// table prefix (path-escaped; their SHA-256 when too long) and a random id
// of 32 hex digits in the store_id column of <prefix>meta, written in the
// transaction that creates the tables (or migrates older ones to schema
// version 3) and read by every later Store. Two Stores with the same
// StoreID serve the same leases; tables in another database, schema or
// prefix have their own id. The id is data, so a dump restored into a new
// database keeps it (as Bump's restore wants: the same store, its tokens
// raised). lease serve sends it to clients (leasehttp WithStoreID), so
// that a client listing several replicas finds one configured with another
// --backend. It is printable ASCII without spaces, at most 128 bytes, and
// "" until the tables are first prepared (Open does; a Store from New, at
// its first operation). Tables dropped under a running Store are made again
// with a new id, by its next operation or by anyone else first, which this
// Store does not take: their tokens start again, below ones it issued (I1),
// so from its next grant on (or as soon as it finds them missing) it
// answers every operation with an error matching lease.ErrUnavailable that
// says so. Restore the old tables (and run Bump), or restart what serves
// them to serve the new ones (see the package documentation, Tables
// dropped under a running Store).
func (s *Store) StoreID() string {
	if p := s.ident.Load(); p != nil {
		return p.storeID
	}
	return ""
}

// Close stops the notification listeners, ends pending WaitChange calls and
// watches (with an error matching lease.ErrUnavailable), and
// closes the pool if Open made it. Later operations fail with an error
// matching lease.ErrUnavailable. Close is idempotent. It returns nil: closing
// a pgx pool cannot fail, and the error is there so that a Store is an
// io.Closer like the other stores, and code that closes whatever backend it
// was given closes this one too.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.notify.close()
	s.closeWatch()
	s.bg.Close()
	if s.owned {
		s.pool.Close()
	}
	return nil
}

// checkedSettings are the settings a grant checks are still on: none
// with AllowVolatile.
func checkedSettings(volatile bool) []string {
	if volatile {
		return nil
	}
	return durableSettings[:]
}

// Pool returns the pool the Store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// errClosed is the cause of operations on a closed Store.
var errClosed = errors.New("store is closed")

// ready checks that the store is open and its tables exist.
func (s *Store) ready(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %w: %w", lease.ErrUnavailable, errClosed)
	}
	return s.ensureSchema(ctx)
}

func validate(key, owner string, ttl time.Duration) error {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	return nil
}

// Acquire implements lease.Backend in one statement, shared with
// concurrent acquisitions of other keys (batch.go). A held key costs a read
// only: no row lock, no transaction ID, no WAL, no commit flush (see doc.go).
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := validate(key, owner, ttl); err != nil {
		return lease.Lease{}, err
	}
	if err := s.ready(ctx); err != nil {
		return lease.Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		// Ended already: send nothing (the statement would outlive it).
		return lease.Lease{}, fmt.Errorf("pgstore: acquiring %q: %w", key, err)
	}
	l, err := s.acquires.do(ctx, key, acquireReq{owner: owner, ttl: ttl})
	var ended *endedError
	switch {
	case errors.Is(err, lease.ErrHeld):
		return lease.Lease{}, err
	case errors.Is(err, ErrVolatile), errors.As(err, new(*replacedError)):
		// Refused: nothing granted.
		return lease.Lease{}, fmt.Errorf("pgstore: acquiring %q: %w", key, err)
	case errors.As(err, &ended) && !ended.sent:
		return lease.Lease{}, s.fail(ctx, fmt.Sprintf("acquiring %q", key), err)
	case errors.As(err, &ended):
		// The statement goes on without us, and the Store releases what
		// it grants (orphaned): the caller holds nothing.
		return lease.Lease{}, fmt.Errorf("pgstore: acquiring %q: gave up waiting for the answer; a lease granted meanwhile is released: %w", key, ended.cause)
	case err != nil:
		// The statement may have committed before its answer was lost;
		// the Store ends what it granted (settle), as soon as it knows.
		return lease.Lease{}, s.fail(ctx, fmt.Sprintf("acquiring %q, outcome unknown; a lease granted is released once the server is reached", key), err)
	}
	return l, nil
}

type acquireReq struct {
	owner string
	ttl   time.Duration
}

// execAcquire sends one acquire statement for calls, on distinct keys.
func (s *Store) execAcquire(ctx context.Context, calls []*call[acquireReq, lease.Lease]) error {
	keys := make([]string, len(calls))
	ids := make([][]byte, len(calls))
	owners := make([]string, len(calls))
	ttls := make([]int64, len(calls))
	byKey := make(map[string]*call[acquireReq, lease.Lease], len(calls))
	sortByKey(calls)
	for i, c := range calls {
		id := lease.NewID()
		keys[i], ids[i], owners[i], ttls[i] = c.key, id[:], c.req.owner, c.req.ttl.Nanoseconds()
		byKey[c.key] = c
		c.res = lease.Lease{Key: c.key, ID: id, TTL: c.req.ttl}
	}
	ident := s.ident.Load()
	if ident == nil {
		// Only a prepared Store sends operations (ready).
		return fmt.Errorf("pgstore: %w: acquire before the tables were prepared", lease.ErrUnavailable)
	}
	sql, args := s.q.acquire.many, []any{keys, ids, owners, ttls, s.n.watchChannel, ident.id}
	if len(calls) == 1 {
		sql, args = s.q.acquire.one, []any{keys[0], ids[0], owners[0], ttls[0], s.n.watchChannel, ident.id}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err // nothing sent
	}
	defer conn.Release()
	err = s.grant(ctx, conn.Conn(), sql, args, calls, byKey)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Severity == "ERROR":
		// The statement failed, and its transaction with it: nothing
		// granted. (A FATAL may come after the commit.)
		if pgErr.Code == "42704" && strings.Contains(pgErr.Message, volatileMark) {
			return fmt.Errorf("%w: %w: %s: set them on again, or pass pgstore.AllowVolatile()", ErrVolatile, lease.ErrUnavailable, volatileMark)
		}
		if isReplacedMark(err) {
			return s.refuseReplaced(s.idNow(ctx, conn))
		}
	case err != nil && !pgconn.SafeToRetry(err):
		// Sent, and the answer lost: end whatever it granted.
		s.settle(conn.Conn().PgConn().PID(), sql, calls)
	}
	return err
}

// grant runs the acquire statement sql with args on conn and sets the
// answers of calls (byKey: by their keys).
func (s *Store) grant(ctx context.Context, conn *pgx.Conn, sql string, args []any, calls []*call[acquireReq, lease.Lease], byKey map[string]*call[acquireReq, lease.Lease]) error {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	type row struct {
		key      string
		acquired bool
		token    lease.Token
		owner    string
		ttlNS    int64
		expires  time.Time
	}
	got := make([]row, 0, len(calls))
	for rows.Next() {
		var r row
		var told *string
		if err := rows.Scan(&r.key, &r.acquired, &r.token, &r.owner, &r.ttlNS, &r.expires, &told); err != nil {
			rows.Close()
			return err
		}
		got = append(got, r)
	}
	// Only a statement that has committed answers anything.
	if err := rows.Err(); err != nil {
		return err
	}
	answered := 0
	for _, r := range got {
		c := byKey[r.key]
		if c == nil || c.res.Token != 0 || c.err != nil {
			return fmt.Errorf("acquire statement returned an unexpected row for %q", r.key)
		}
		answered++
		if !r.acquired {
			c.res, c.err = lease.Lease{}, &lease.HeldError{Key: r.key, Owner: r.owner, Token: r.token, Expires: r.expires}
			continue
		}
		c.res.Token, c.res.Owner, c.res.Expires = r.token, r.owner, r.expires
	}
	if answered == len(calls) {
		return nil
	}
	for _, c := range calls {
		if c.res.Token == 0 && c.err == nil {
			// The row was free when we looked, but a concurrent acquire got
			// there first; its holder is not in our statement's snapshot.
			c.res, c.err = lease.Lease{}, fmt.Errorf("pgstore: %q was just taken by a concurrent acquire: %w", c.key, lease.ErrHeld)
		}
	}
	return nil
}

// sortByKey puts a batch in key order (byte-wise, as the table's C
// collation), so that concurrent statements lock rows in one order.
func sortByKey[Req, Res any](calls []*call[Req, Res]) {
	slices.SortFunc(calls, func(a, b *call[Req, Res]) int { return strings.Compare(a.key, b.key) })
}

// Renew implements lease.Backend. It commits durably: a renewal lost in a
// crash would let the server hand the key on before the holder's deadline.
func (s *Store) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateLease(l); err != nil {
		return lease.Lease{}, fmt.Errorf("pgstore: %w", err)
	}
	if err := lease.ValidateTTL(ttl); err != nil {
		return lease.Lease{}, fmt.Errorf("pgstore: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return lease.Lease{}, err
	}
	r, err := s.renews.do(ctx, l.Key, renewReq{l: l, ttl: ttl})
	switch {
	case errors.Is(err, lease.ErrNotHeld):
		return lease.Lease{}, err
	case err != nil:
		return lease.Lease{}, s.fail(ctx, fmt.Sprintf("renewing %q", l.Key), err)
	}
	return r, nil
}

// RenewBatch implements lease.BatchRenewer: one renew statement over
// arrays for the whole batch (the statement a group of concurrent Renews
// shares), in one transaction. A key named twice in the batch is renewed
// the second time by a statement of its own after the first, as two Renews
// one after the other would be.
func (s *Store) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	calls := make([]*call[renewReq, lease.Lease], len(renewals))
	for i, r := range renewals {
		calls[i] = &call[renewReq, lease.Lease]{ctx: ctx, key: r.Lease.Key, req: renewReq{l: r.Lease, ttl: r.TTL}}
	}
	for rest := calls; len(rest) > 0; {
		seen := make(map[string]bool, len(rest))
		var now, later []*call[renewReq, lease.Lease]
		for _, c := range rest {
			if seen[c.key] {
				later = append(later, c)
				continue
			}
			seen[c.key] = true
			now = append(now, c)
		}
		if err := s.execRenew(ctx, now); err != nil {
			return nil, s.fail(ctx, fmt.Sprintf("renewing a batch of %d", len(renewals)), err)
		}
		rest = later
	}
	out := make([]lease.RenewResult, len(calls))
	for i, c := range calls {
		out[i] = lease.RenewResult{Lease: c.res, Err: c.err}
	}
	return out, nil
}

type renewReq struct {
	l   lease.Lease
	ttl time.Duration
}

// execRenew sends one renew statement for calls, on distinct keys.
func (s *Store) execRenew(ctx context.Context, calls []*call[renewReq, lease.Lease]) error {
	keys := make([]string, len(calls))
	tokens := make([]int64, len(calls))
	ids := make([][]byte, len(calls))
	ttls := make([]int64, len(calls))
	byKey := make(map[string]*call[renewReq, lease.Lease], len(calls))
	sortByKey(calls)
	for i, c := range calls {
		keys[i], tokens[i], ids[i], ttls[i] = c.key, int64(c.req.l.Token), c.req.l.ID[:], c.req.ttl.Nanoseconds()
		byKey[c.key] = c
	}
	sql, args := s.q.renew.many, []any{keys, tokens, ids, ttls, s.n.watchChannel}
	if len(calls) == 1 {
		sql, args = s.q.renew.one, []any{keys[0], tokens[0], ids[0], ttls[0], s.n.watchChannel}
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	type row struct {
		key, owner string
		expires    time.Time
	}
	got := make([]row, 0, len(calls))
	for rows.Next() {
		var r row
		var told string
		if err := rows.Scan(&r.key, &r.owner, &r.expires, &told); err != nil {
			rows.Close()
			return err
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range got {
		c := byKey[r.key]
		if c == nil || c.res.Token != 0 {
			return fmt.Errorf("renew statement returned an unexpected row for %q", r.key)
		}
		l := c.req.l
		c.res = lease.Lease{Key: l.Key, Owner: r.owner, Token: l.Token, ID: l.ID, TTL: c.req.ttl, Expires: r.expires}
	}
	for _, c := range calls {
		if c.res.Token == 0 {
			c.err = fmt.Errorf("pgstore: renewing %q token %d: %w", c.key, c.req.l.Token, lease.ErrNotHeld)
		}
	}
	return nil
}

// Release implements lease.Backend. The row stays, marked free, so that the
// key's token high-water mark survives; waiters are notified on commit.
func (s *Store) Release(ctx context.Context, l lease.Lease) error {
	if err := lease.ValidateLease(l); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	_, err := s.releases.do(ctx, l.Key, l)
	switch {
	case errors.Is(err, lease.ErrNotHeld):
		return err
	case err != nil:
		return s.fail(ctx, fmt.Sprintf("releasing %q", l.Key), err)
	}
	return nil
}

// execRelease sends one release statement for calls, on distinct keys.
func (s *Store) execRelease(ctx context.Context, calls []*call[lease.Lease, struct{}]) error {
	keys := make([]string, len(calls))
	tokens := make([]int64, len(calls))
	ids := make([][]byte, len(calls))
	sortByKey(calls)
	for i, c := range calls {
		keys[i], tokens[i], ids[i] = c.key, int64(c.req.Token), c.req.ID[:]
	}
	sql, args := s.q.release.many, []any{keys, tokens, ids, s.n.channel, s.n.watchChannel}
	if len(calls) == 1 {
		sql, args = s.q.release.one, []any{keys[0], tokens[0], ids[0], s.n.channel, s.n.watchChannel}
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	var released []string
	for rows.Next() {
		var key string
		var notified, setting, told *string
		if err := rows.Scan(&key, &notified, &setting, &told); err != nil {
			rows.Close()
			return err
		}
		released = append(released, key)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range calls {
		if !slices.Contains(released, c.key) {
			c.err = fmt.Errorf("pgstore: releasing %q token %d: %w", c.key, c.req.Token, lease.ErrNotHeld)
		}
	}
	return nil
}

// Get implements lease.Backend.
func (s *Store) Get(ctx context.Context, key string) (lease.Lease, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Lease{}, fmt.Errorf("pgstore: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return lease.Lease{}, err
	}
	l := lease.Lease{Key: key}
	var ttlNS int64
	err := s.pool.QueryRow(ctx, s.q.get, key).Scan(&l.Owner, &l.Token, &ttlNS, &l.Expires)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return lease.Lease{}, fmt.Errorf("pgstore: %q: %w", key, lease.ErrNotFound)
	case err != nil:
		return lease.Lease{}, s.fail(ctx, fmt.Sprintf("reading %q", key), err)
	}
	l.TTL = time.Duration(ttlNS)
	return l, nil
}

// List implements lease.Backend with one statement per page: the keys
// after the cursor's in the primary key's order, up to the page and one
// more. Rows of expired leases stay as their keys' token high-water marks,
// so a page may read past many of them.
func (s *Store) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	limit, after, err := lease.ParseList(prefix, page)
	if err != nil {
		return lease.ListPage{}, err
	}
	if err := s.ready(ctx); err != nil {
		return lease.ListPage{}, err
	}
	rows, err := s.pool.Query(ctx, s.q.list, prefix, after, limit+1)
	if err != nil {
		return lease.ListPage{}, s.fail(ctx, fmt.Sprintf("listing %q", prefix), err)
	}
	var out []lease.Lease
	for rows.Next() {
		var l lease.Lease
		var ttlNS int64
		if err := rows.Scan(&l.Key, &l.Owner, &l.Token, &ttlNS, &l.Expires); err != nil {
			rows.Close()
			return lease.ListPage{}, s.fail(ctx, fmt.Sprintf("listing %q", prefix), err)
		}
		l.TTL = time.Duration(ttlNS)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return lease.ListPage{}, s.fail(ctx, fmt.Sprintf("listing %q", prefix), err)
	}
	return lease.PageOf(out, limit), nil
}

// fail wraps a database error from an operation on key. The outcome of the
// operation is unknown to us (the statement may have committed before the
// connection broke), so it is reported as unavailability, never as an
// answer.
func (s *Store) fail(ctx context.Context, what string, err error) error {
	var pgErr *pgconn.PgError
	// undefined_table: dropped under us; undefined_column: made anew at
	// an older schema version (replaced.go). The next operation prepares
	// the tables again, and finds out which.
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703") {
		s.schemaOK.Store(false)
	}
	return s.wrap(ctx, what, err)
}

// wrap makes err match lease.ErrUnavailable, and ctx's error if ctx ended.
func (s *Store) wrap(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("pgstore: %s: %w: %w (%w)", what, lease.ErrUnavailable, err, cerr)
	}
	return fmt.Errorf("pgstore: %s: %w: %w", what, lease.ErrUnavailable, err)
}

// invalidf returns an error matching lease.ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("pgstore: %w: "+format, append([]any{lease.ErrInvalid}, args...)...)
}

package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/sqlident"
)

// SchemaVersion is the version of the tables this release reads and writes.
// Open and New's first operation create them, or migrate older ones, and
// refuse tables of a newer version with an error matching ErrSchemaVersion.
//
// Version 2 added token_floor to <prefix>meta (Store.Bump), version 3
// store_id (Store.StoreID).
const SchemaVersion = 3

// ErrSchemaVersion means the store's tables were made by a newer release of
// pgstore than this one, which must not write to them.
var ErrSchemaVersion = errors.New("pgstore: schema version is newer than this release supports")

// names are the identifiers a Store uses, quoted for SQL.
type names struct {
	leases  string // schema-qualified leases table
	meta    string // schema-qualified one-row table: schema version and token floor
	channel string // NOTIFY channel of releases waited for, an unquoted lower-case identifier
	// watchChannel is the NOTIFY channel of every change, for Watch.
	watchChannel string
	lockKey      string // text hashed into the advisory lock that serialises migrations
	// lockClass is the first half of the advisory lock (class, hash of key)
	// an acquire tries before upserting; see queries.go.
	lockClass int32
}

func newNames(schema, prefix string) (names, error) {
	if err := checkIdent("schema", schema); err != nil {
		return names{}, err
	}
	if prefix != "" {
		if err := checkIdent("table prefix", prefix+"leases"); err != nil {
			return names{}, err
		}
	}
	// The channel is a fixed function of the tables, so every Store on the
	// same tables, in any process, listens and notifies on the same channel.
	sum := sha256.Sum256([]byte(schema + "\x00" + prefix))
	return names{
		leases:       pgx.Identifier{schema, prefix + "leases"}.Sanitize(),
		meta:         pgx.Identifier{schema, prefix + "meta"}.Sanitize(),
		channel:      "pgstore_" + hex.EncodeToString(sum[:12]),
		watchChannel: "pgstore_" + hex.EncodeToString(sum[:12]) + "_changes",
		lockKey:      "pgstore schema " + pgx.Identifier{schema, prefix}.Sanitize(),
		lockClass:    int32(binary.BigEndian.Uint32(sum[12:16])),
	}, nil
}

func checkIdent(what, name string) error {
	if err := sqlident.PostgreSQL.Check(what, name); err != nil {
		return invalidf("%v", err)
	}
	return nil
}

// migrations[v] takes the tables from version v to v+1.
var migrations = []func(n names) []string{
	0: func(n names) []string {
		return []string{
			// One row per key ever acquired. Release and expiry leave the row
			// in place, so token is the key's high-water mark and the next
			// acquisition continues from it (I1). The C collation makes keys
			// compare byte-wise, as Go does, and lets PostgreSQL 15 serve
			// starts_with from the primary key. fillfactor leaves room in each
			// page for HOT updates: acquire, renew and release rewrite the row
			// without touching the index. wanted says a WaitChange is waiting
			// for this generation, so its release must notify.
			`CREATE TABLE IF NOT EXISTS ` + n.leases + ` (
				key        text COLLATE "C" PRIMARY KEY,
				token      bigint NOT NULL CHECK (token BETWEEN 1 AND 9007199254740992),
				id         bytea NOT NULL,
				owner      text NOT NULL,
				ttl_ns     bigint NOT NULL,
				expires_at timestamptz NOT NULL,
				wanted     boolean NOT NULL DEFAULT false
			) WITH (fillfactor = 70)`,
		}
	},
	1: func(n names) []string {
		return []string{
			// The token floor: every grant issues a token above both its
			// key's row and this, so a key without a row starts at
			// token_floor + 1. Bump raises it after a restore, for keys the
			// restored rows do not know. It stays below 2^53, so one more
			// token still fits the leases' CHECK.
			`ALTER TABLE ` + n.meta + ` ADD COLUMN IF NOT EXISTS token_floor bigint NOT NULL DEFAULT 0
				CHECK (token_floor BETWEEN 0 AND 9007199254740991)`,
		}
	},
	2: func(n names) []string {
		return []string{
			// The store's random id (Store.StoreID), set by migrate in the
			// transaction that adds it, or that creates the tables.
			`ALTER TABLE ` + n.meta + ` ADD COLUMN IF NOT EXISTS store_id text
				CHECK (store_id ~ '^[0-9a-f]{32}$')`,
		}
	},
}

// ensureSchema creates or migrates the tables, once per Store while it
// succeeds. Concurrent Stores (other processes too) serialise on an advisory
// lock, since concurrent CREATE TABLE IF NOT EXISTS can fail.
//
// The preparation runs in the Store's background work (Close ends it), on a
// deadline of its own (schemaTimeout), and every operation that needs the
// tables waits for it only while its own context lasts. It used to run on
// the context of the operation that found the tables unprepared, so an
// operation giving up rolled it back: on a loaded server, where preparing
// took longer than the acquisitions of a short TTL wait for their answers
// (a Client gives up one whose answer would come after its TTL), every
// attempt was rolled back in turn, and the Store never served.
func (s *Store) ensureSchema(ctx context.Context) error {
	// Replaced first: a Store that found its tables replaced by a grant
	// (replaced.go) still has them prepared.
	if err := s.refusal(); err != nil {
		return err
	}
	if s.schemaOK.Load() {
		return nil
	}
	s.prepMu.Lock()
	p := s.prep
	if p == nil {
		p = &preparation{done: make(chan struct{})}
		started := s.bg.Go(func(bctx context.Context) {
			pctx, cancel := context.WithTimeout(bctx, schemaTimeout)
			defer cancel()
			p.err = s.prepare(pctx)
			s.prepMu.Lock()
			s.prep = nil // after a failure, the next operation tries again
			s.prepMu.Unlock()
			close(p.done)
		})
		if !started {
			s.prepMu.Unlock()
			return fmt.Errorf("pgstore: %w: %w", lease.ErrUnavailable, errClosed)
		}
		s.prep = p
	}
	s.prepMu.Unlock()
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return s.wrap(ctx, "waiting for the tables to be prepared", context.Cause(ctx))
	}
}

// schemaTimeout bounds one preparation of the tables: a server that does
// not finish it by then is tried again by the next operation.
const schemaTimeout = 30 * time.Second

// preparation is one attempt at preparing the tables: done is closed when
// it ends, with err its outcome.
type preparation struct {
	done chan struct{}
	err  error
}

// prepare checks the server's durability, creates or migrates the tables
// and reads the store id.
func (s *Store) prepare(ctx context.Context) error {
	if !s.volatile {
		if err := s.checkDurable(ctx); err != nil {
			return err
		}
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	var id *string
	if err := s.pool.QueryRow(ctx, `SELECT store_id FROM `+s.n.meta).Scan(&id); err != nil {
		return s.wrap(ctx, "reading the store id", err)
	}
	if id == nil {
		return fmt.Errorf("pgstore: %w: %s holds no store_id", lease.ErrUnavailable, s.n.meta)
	}
	now := identity{id: *id, storeID: storeIDOf(s.schema, s.prefix, *id)}
	if !s.ident.CompareAndSwap(nil, &now) && s.ident.Load().id != now.id {
		// The tables this Store served were dropped (an operation found
		// them missing) and are new.
		return s.refuseReplaced(now.storeID)
	}
	s.schemaOK.Store(true)
	return nil
}

// storeIDOf is StoreID's format: "postgres:", the schema and table prefix
// joined by "." and path-escaped (their SHA-256 when that would make it
// longer than 128 bytes), ":" and the id's 32 hex digits.
func storeIDOf(schema, prefix, id string) string {
	p := url.PathEscape(schema + "." + prefix)
	if len(p) > 128-len("postgres:")-1-len(id) {
		p = fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(schema+"."+prefix)))[:48]
	}
	return "postgres:" + p + ":" + id
}

// ErrVolatile means the PostgreSQL server runs with settings under which a
// crash of its machine can lose or corrupt committed writes, so tokens
// could go backwards (invariants I1, I7), and the Store was not told to run
// anyway (AllowVolatile). The error names the settings and how to fix them.
var ErrVolatile = errors.New("pgstore: PostgreSQL server is not durable")

// durableSettings are the server settings a grant's durability rests on,
// each with the value it must have: fsync, or a flushed commit is not on
// disk; full_page_writes, or a page torn by a crash cannot be repaired by
// recovery and may come back with older tokens.
var durableSettings = [...]string{"fsync", "full_page_writes"}

// checkDurable refuses a server whose settings cannot keep a committed
// grant through a crash of its machine. It runs with the tables' first
// preparation, before the Store serves anything; a server reconfigured
// later is refused its grants by the grants themselves (stillDurable).
func (s *Store) checkDurable(ctx context.Context) error {
	var off []string
	for _, name := range durableSettings {
		var v string
		if err := s.pool.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			return s.wrap(ctx, "reading the server's "+name+" setting", err)
		}
		if v != "on" {
			off = append(off, name+" = "+v)
		}
	}
	if len(off) == 0 {
		return nil
	}
	return fmt.Errorf("%w (%s): a crash of its machine can lose or corrupt committed grants, and tokens could then go backwards; "+
		"set them on (ALTER SYSTEM SET … = on; SELECT pg_reload_conf()), or pass pgstore.AllowVolatile() to run without that guarantee",
		ErrVolatile, strings.Join(off, ", "))
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.wrap(ctx, "preparing tables", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.n.lockKey); err != nil {
		return s.wrap(ctx, "locking tables for migration", err)
	}
	var version int
	var hasMeta bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.n.meta).Scan(&hasMeta); err != nil {
		return s.wrap(ctx, "looking for tables", err)
	}
	if hasMeta {
		err := tx.QueryRow(ctx, `SELECT version FROM `+s.n.meta).Scan(&version)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return s.wrap(ctx, "reading schema version", err)
		}
	}
	switch {
	case version > SchemaVersion:
		return fmt.Errorf("%w: %s is at version %d, this release knows up to %d", ErrSchemaVersion, s.n.meta, version, SchemaVersion)
	case version == SchemaVersion:
		return nil // nothing to create: no DDL, so no CREATE privilege needed
	}
	var hasSchema bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, s.schema).Scan(&hasSchema); err != nil {
		return s.wrap(ctx, "looking for schema", err)
	}
	ddl := []string{}
	if !hasSchema {
		ddl = append(ddl, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.schema}.Sanitize())
	}
	ddl = append(ddl, `CREATE TABLE IF NOT EXISTS `+s.n.meta+` (
		one     boolean PRIMARY KEY DEFAULT true CHECK (one),
		version integer NOT NULL
	)`)
	for v := version; v < SchemaVersion; v++ {
		ddl = append(ddl, migrations[v](s.n)...)
	}
	for _, stmt := range ddl {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return s.wrap(ctx, "creating tables", err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.n.meta+` (version) VALUES ($1)
		ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version`, SchemaVersion); err != nil {
		return s.wrap(ctx, "recording schema version", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE `+s.n.meta+` SET store_id = $1 WHERE store_id IS NULL`, lease.NewID().Reveal()); err != nil {
		return s.wrap(ctx, "recording the store id", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.wrap(ctx, "committing tables", err)
	}
	return nil
}

package pgstore

import (
	"strconv"
	"strings"
)

// queries are the statements of one Store, with its table names filled in.
// Each operation is one statement, sent in one round trip (pgx prepares it
// once per connection and then only binds and executes).
type queries struct {
	// acquire, renew and release serve one operation or a batch of them on
	// distinct keys (batch.go).
	acquire, renew, release stmt
	get, list, wait         string
	// stopped and granted settle an acquire statement whose answer was
	// lost (settle.go).
	stopped, granted string
	// watchSnapshot and watchCheck serve Watch (watch.go).
	watchSnapshot, watchCheck string
}

// stmt is a statement in two forms with one body: for a lone operation,
// with scalar parameters, and for a batch, with arrays unnested into rows.
// Both bind the operations to a relation req and find the rows with the
// condition key <match>. A lone operation does not pay for arrays and a
// join (the planner folds its one-row req into constants), and a batch
// gets exactly what each of its operations would have got alone.
type stmt struct{ one, many string }

// batched builds both forms of a statement. cols are req's columns after
// key, with their types; body is the statement after the WITH list's req.
func batched(cols [][2]string, body func(match string) string) stmt {
	one := `SELECT $1::text COLLATE "C" AS key`
	arrays, names := `$1::text[]`, `key`
	for i, c := range cols {
		p := "$" + strconv.Itoa(i+2)
		one += ", " + p + "::" + c[1] + " AS " + c[0]
		arrays += ", " + p + "::" + c[1] + "[]"
		names += ", " + c[0]
	}
	many := `SELECT r.key COLLATE "C" AS key`
	for _, c := range cols {
		many += ", r." + c[0]
	}
	many += ` FROM unnest(` + arrays + `) AS r(` + names + `)`
	// NOT MATERIALIZED: req is inlined where it is used, so that the lone
	// form's constants reach the index conditions.
	return stmt{
		one:  `WITH req AS NOT MATERIALIZED (` + one + `)` + body(`= $1`),
		many: `WITH req AS NOT MATERIALIZED (` + many + `)` + body(`= ANY ($1::text[])`),
	}
}

// expiresAt turns a TTL in nanoseconds into an expiry on the server's clock.
// timestamptz has microseconds; the division truncates, so the server never
// keeps a lease longer than asked.
func expiresAt(ttlNS string) string {
	return `clock_timestamp() + (` + ttlNS + ` / 1000) * interval '1 microsecond'`
}

// durableCommit is a condition, true whenever it is evaluated, that makes
// the statement's transaction commit synchronously (wait for its WAL flush)
// even if the session has synchronous_commit = off: Acquire and Renew put it
// in the WHERE of every row they write, so a row written means a durable
// commit before the answer, whatever the server, role or pool configures
// (I1: a token returned is never issued again after a crash). Stronger
// settings (remote_write, remote_apply) and local are kept as they are.
const durableCommit = `set_config('synchronous_commit', CASE current_setting('synchronous_commit') WHEN 'off' THEN 'on' ` +
	`ELSE current_setting('synchronous_commit') END, true) IS NOT NULL`

// stillDurable is a condition, true while the server's settings (fsync and
// full_page_writes: durableSettings) are on, that otherwise ends the statement with an error
// carrying volatileMark: asking current_setting for a setting that does
// not exist is how plain SQL raises one. The Store checks both settings
// when it starts (checkDurable); a grant checks them again, so that a
// server reconfigured since (ALTER SYSTEM SET fsync = off and a reload)
// grants nothing a crash of its machine could take back (I1, I7).
func stillDurable(settings []string) string {
	all := make([]string, len(settings))
	for i, name := range settings {
		all[i] = `current_setting('` + name + `')::bool`
	}
	return `(CASE WHEN ` + strings.Join(all, " AND ") + ` THEN true ELSE current_setting('` + volatileMark + `') IS NULL END)`
}

// volatileMark names the error of stillDurable (SQLSTATE 42704,
// unrecognized configuration parameter).
const volatileMark = "pgstore: fsync or full_page_writes was turned off after the store started, no grant"

// newQueries builds the Store's statements. Without durable (tests only: the
// negative control of the crash test), Acquire and Renew commit as the
// session's synchronous_commit says. With checked settings (a Store
// without AllowVolatile: durableSettings), a grant also checks that they
// are still on (stillDurable).
func newQueries(n names, durable bool, checked []string) queries {
	durably := ""
	if durable {
		durably = " AND " + durableCommit
	}
	// floor is the token floor (Bump), an uncorrelated scalar subquery:
	// computed at most once per statement, and only when upd or ins
	// writes a row. It is read only where <prefix>meta holds the Store's
	// own store id (parameter $6): on tables dropped and made anew by
	// anyone, it ends the statement with an error carrying replacedMark
	// (replaced.go), so that no grant comes out of them.
	floor := floorExpr(n)
	tryLock := `pg_try_advisory_xact_lock(` + strconv.Itoa(int(n.lockClass)) + `, hashtext(req.key))`
	// A grant, and only a grant, checks the settings: inside the CASE that
	// a held key's try never reaches, and not in a renewal.
	lockIfFree := tryLock
	if len(checked) > 0 {
		lockIfFree = stillDurable(checked) + " AND " + tryLock
	}
	return queries{
		// cur reads the keys' rows without locking them. Only a key whose row
		// is expired goes on to upd, and only a key without a row to ins: a
		// try on a held key is a pure read, with no row lock (upd's WHERE
		// fails on the row before it is locked), and a statement that finds
		// all its keys held gets no transaction ID and so writes no commit
		// record and flushes no WAL. Races are decided on the row's latest
		// version: upd's WHERE is checked again on it after a concurrent
		// writer commits (a concurrent acquire leaves it unexpired), and ins
		// does nothing on a key inserted meanwhile. Either way that key gets
		// no row back at all. An expired row is updated in place rather than
		// upserted: one WAL record (a HOT update) instead of a tuple lock and
		// an update.
		//
		// Before writing, contenders for one free key also try a
		// transaction-scoped advisory lock on (table class, hash of key),
		// which lives in memory only: all but one give up at once, read-only,
		// instead of queueing for the winner's row lock and then writing a
		// row lock and a commit of their own (ANCHORS.md: 17 WAL flushes per
		// hand-over). The advisory lock is only a filter — the row's own
		// expiry stays the judge — so a hash collision costs at worst a
		// spurious "held" that the caller retries. The CASE tries it only
		// for keys cur saw free.
		//
		// A grant's token is one above both the key's last token and the
		// token floor (Bump): a key without a row starts at the floor + 1,
		// and a key with a row goes on from it. (No row's token is below
		// the floor: Bump raises every row to the floor it sets, in the
		// transaction that sets it, and rows inserted later start above
		// it. upd reads the floor all the same, for the store id check
		// that comes with it: on tables made anew by another Store, a key
		// has the other's row, whose tokens start again at 1.)
		//
		// Every acquisition tells watchers (told), in the statement that
		// makes it.
		//
		// Parameters: keys, ids, owners, TTLs in ns; the watch channel;
		// the store id (the Store's identity.id).
		acquire: batched([][2]string{{"id", "bytea"}, {"owner", "text"}, {"ttl_ns", "bigint"}}, func(match string) string {
			return `, cur AS MATERIALIZED (
	SELECT key, token, owner, ttl_ns, expires_at, expires_at > clock_timestamp() AS live
	FROM ` + n.leases + ` WHERE key ` + match + `
), upd AS (
	UPDATE ` + n.leases + ` AS l SET token = greatest(l.token, ` + floor + `) + 1, id = req.id, owner = req.owner,
		ttl_ns = req.ttl_ns, expires_at = ` + expiresAt("req.ttl_ns") + `, wanted = false
	FROM req
	WHERE l.key ` + match + ` AND l.key = req.key AND l.expires_at <= clock_timestamp()
		AND CASE WHEN EXISTS (SELECT FROM cur WHERE cur.key = req.key AND cur.live) THEN false ELSE ` + lockIfFree + ` END` + durably + `
	RETURNING l.key, true AS acquired, l.token, l.owner, l.ttl_ns, l.expires_at, ` + told("'a'", "l.expires_at", "$5") + `
), ins AS (
	INSERT INTO ` + n.leases + ` AS l (key, token, id, owner, ttl_ns, expires_at)
	SELECT req.key, ` + floor + ` + 1, req.id, req.owner, req.ttl_ns, ` + expiresAt("req.ttl_ns") + `
	FROM req
	WHERE CASE WHEN EXISTS (SELECT FROM cur WHERE cur.key = req.key) THEN false ELSE ` + lockIfFree + ` END` + durably + `
	ON CONFLICT (key) DO NOTHING
	RETURNING l.key, true, l.token, l.owner, l.ttl_ns, l.expires_at, ` + told("'a'", "l.expires_at", "$5") + `
)
SELECT * FROM upd
UNION ALL SELECT * FROM ins
UNION ALL SELECT key, false, token, owner, ttl_ns, expires_at, NULL FROM cur WHERE live`
		}),

		// Parameters: keys, tokens, ids, TTLs in ns; the watch channel.
		renew: batched([][2]string{{"token", "bigint"}, {"id", "bytea"}, {"ttl_ns", "bigint"}}, func(match string) string {
			return `
UPDATE ` + n.leases + ` AS l SET ttl_ns = req.ttl_ns, expires_at = ` + expiresAt("req.ttl_ns") + `
FROM req
WHERE l.key ` + match + ` AND l.key = req.key AND l.token = req.token AND l.id = req.id
	AND l.expires_at > clock_timestamp()` + durably + `
RETURNING l.key, l.owner, l.expires_at, ` + told("'n'", "l.expires_at", "$5")
		}),

		// Release keeps the row (its token is the key's high-water mark) and
		// marks it free. If a WaitChange marked the generation wanted, it
		// notifies the wait channel, in the same statement; NOTIFY is
		// delivered on commit. Releases nobody waits for send nothing
		// there. (Every release notifies the watch channel, below.)
		//
		// The commit is asynchronous (synchronous_commit off for this
		// transaction only): a release lost in a crash only makes the key
		// look held until its TTL, and the next durable commit on the server
		// flushes it anyway.
		//
		// Watchers are told every release (told), with the expiry the
		// lease had (o, the row as the statement's snapshot saw it).
		//
		// Parameters: keys, tokens, ids; the wait channel; the watch
		// channel.
		release: batched([][2]string{{"token", "bigint"}, {"id", "bytea"}}, func(match string) string {
			return `
UPDATE ` + n.leases + ` AS l SET expires_at = '-infinity'
FROM req JOIN ` + n.leases + ` AS o ON o.key = req.key
WHERE l.key ` + match + ` AND l.key = req.key AND l.token = req.token AND l.id = req.id
	AND l.expires_at > clock_timestamp()
RETURNING l.key, CASE WHEN l.wanted THEN pg_notify($4::text, l.key) END, set_config('synchronous_commit', 'off', true),
	` + told("'r'", "o.expires_at", "$5")
		}),

		// stopped ends the backend that ran an acquire statement whose
		// answer was lost, if it still runs it, and waits (10 s at most)
		// until it has exited: its transaction has then committed or
		// aborted, and no grant of it can come later. A statement ended
		// on this side (pgx closes the connection) goes on on the server
		// until it next reads from the client, which it does not while
		// it waits on a lock or commits. pg_stat_activity.query is cut at
		// track_activity_query_size, so the statement is matched by its
		// start. false: the backend outlived the wait.
		//
		// $1 the backend's PID; $2 the statement.
		stopped: `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
WHERE pid = $1 AND state <> 'idle' AND query <> '' AND starts_with($2, query)`,

		// granted finds the unexpired leases of the IDs given: what an
		// acquire statement granted, read once its backend is known to be
		// gone (stopped). An ID is 128 random bits chosen before the
		// statement, so a lease found is one that statement granted.
		//
		// $1 keys, $2 their IDs.
		granted: `SELECT l.key, l.token FROM unnest($1::text[], $2::bytea[]) AS r(key, id)
JOIN ` + n.leases + ` AS l ON l.key = r.key AND l.id = r.id
WHERE l.expires_at > clock_timestamp()`,

		get: `SELECT owner, token, ttl_ns, expires_at FROM ` + n.leases + `
WHERE key = $1 AND expires_at > clock_timestamp()`,

		// list reads a page and one lease more in the primary key's order
		// (byte order, by the C collation), from past the cursor's key $2.
		// key >= $1 bounds the index scan where starts_with alone might not.
		list: `SELECT key, owner, token, ttl_ns, expires_at FROM ` + n.leases + `
WHERE key >= $1 AND key > $2 AND starts_with(key, $1) AND expires_at > clock_timestamp()
ORDER BY key LIMIT $3`,

		// wait marks the current generation wanted (so that its release
		// notifies) and says how long it has left, on the server's clock.
		// The mark is written only by the first waiter of a generation, and
		// asynchronously: a crash that loses it also drops every listener.
		// If the row changed between cur's read and upd's write (released,
		// say), no row comes back and the caller looks again rather than
		// wait for a notification that was never sent.
		//
		// $1 key.
		wait: `WITH cur AS MATERIALIZED (
	SELECT wanted, expires_at FROM ` + n.leases + ` WHERE key = $1 AND expires_at > clock_timestamp()
), upd AS (
	UPDATE ` + n.leases + ` SET wanted = true
	WHERE key = $1 AND expires_at > clock_timestamp() AND EXISTS (SELECT FROM cur WHERE NOT cur.wanted)
	RETURNING expires_at
)
SELECT (extract(epoch FROM e.expires_at - clock_timestamp()) * 1e6)::bigint, set_config('synchronous_commit', 'off', true)
FROM (SELECT expires_at FROM cur WHERE wanted UNION ALL SELECT expires_at FROM upd) e`,

		// watchSnapshot reads every row under a prefix in one MVCC
		// snapshot, free ones too (their token is the key's version).
		//
		// $1 prefix.
		watchSnapshot: `SELECT key, token, owner, ttl_ns, CASE WHEN live THEN expires_at END
FROM (SELECT *, expires_at > clock_timestamp() AS live FROM ` + n.leases + ` WHERE starts_with(key, $1)) r`,

		// watchCheck says of each key whether its lease is live (and until
		// when), released (expires_at is -infinity) or expired.
		//
		// $1 keys.
		watchCheck: `SELECT key, token, CASE WHEN expires_at > clock_timestamp() THEN expires_at END, expires_at = '-infinity'
FROM ` + n.leases + ` WHERE key = ANY ($1::text[])`,
	}
}

// floorExpr is the token floor of tables whose store id is parameter $6,
// as the acquire statement reads it: on tables with another store id, or
// none, an error carrying replacedMark (current_setting of a setting that
// does not exist raises one; coalesce evaluates it only then).
func floorExpr(n names) string {
	return `coalesce((SELECT token_floor FROM ` + n.meta + ` WHERE store_id = $6::text), current_setting('` + replacedMark + `')::bigint)`
}

// told is the expression that tells watchers of a change to row l, as one
// NOTIFY on the watch channel (parameter ch) delivered on commit: the kind
// ('a' acquired, 'n' renewed, 'r' released), then
// TOKEN:EXPIRES_µs:TTL_ns:KEYLEN:KEY OWNER (see parseChange). Its value is
// the empty string.
func told(kind, expires, ch string) string {
	return `pg_notify(` + ch + `::text, ` + kind + ` || l.token || ':' || (extract(epoch FROM ` + expires + `) * 1000000)::bigint || ':' || ` +
		`l.ttl_ns || ':' || octet_length(l.key) || ':' || l.key || l.owner)::text`
}

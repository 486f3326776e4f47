package pgstore

import "strconv"

// queries are the statements of one Store, with its table names filled in.
// Each operation is one statement, sent in one round trip (pgx prepares it
// once per connection and then only binds and executes).
type queries struct {
	acquire, renew, release, get, list, wait string
}

// expiresAt turns a TTL in nanoseconds into an expiry on the server's clock.
// timestamptz has microseconds; the division truncates, so the server never
// keeps a lease longer than asked.
func expiresAt(ttlNS string) string {
	return `clock_timestamp() + (` + ttlNS + ` / 1000) * interval '1 microsecond'`
}

func newQueries(n names) queries {
	return queries{
		// cur reads the key's row without locking it. Only if it is absent
		// or expired does ins try the upsert: a try on a held key is a pure
		// read, with no row lock, no transaction ID and so no commit record
		// or WAL flush. The upsert's own WHERE decides races: a concurrent
		// acquire that commits first leaves the row unexpired, and then the
		// statement returns no row at all.
		//
		// Before upserting, contenders for one free key also try a
		// transaction-scoped advisory lock on (table class, hash of key),
		// which lives in memory only: all but one give up at once, read-only,
		// instead of queueing for the winner's row lock and then writing a
		// row lock and a commit of their own (ANCHORS.md: 17 WAL flushes per
		// hand-over). The advisory lock is only a filter — the upsert's WHERE
		// stays the judge — so a hash collision costs at worst a spurious
		// "held" that the caller retries.
		//
		// $1 key, $2 id, $3 owner, $4 ttl in ns.
		acquire: `WITH cur AS MATERIALIZED (
	SELECT token, owner, ttl_ns, expires_at, expires_at > clock_timestamp() AS live
	FROM ` + n.leases + ` WHERE key = $1
), ins AS (
	INSERT INTO ` + n.leases + ` AS l (key, token, id, owner, ttl_ns, expires_at)
	SELECT $1::text, 1, $2::bytea, $3::text, $4::bigint, ` + expiresAt("$4::bigint") + `
	WHERE CASE WHEN EXISTS (SELECT FROM cur WHERE cur.live) THEN false
		ELSE pg_try_advisory_xact_lock(` + strconv.Itoa(int(n.lockClass)) + `, hashtext($1::text)) END
	ON CONFLICT (key) DO UPDATE SET
		token = l.token + 1, id = EXCLUDED.id, owner = EXCLUDED.owner, ttl_ns = EXCLUDED.ttl_ns,
		expires_at = ` + expiresAt("EXCLUDED.ttl_ns") + `, wanted = false
	WHERE l.expires_at <= clock_timestamp()
	RETURNING true, token, owner, ttl_ns, expires_at
)
SELECT * FROM ins
UNION ALL
SELECT false, token, owner, ttl_ns, expires_at FROM cur WHERE live AND NOT EXISTS (SELECT FROM ins)`,

		// $1 key, $2 token, $3 id, $4 ttl in ns.
		renew: `UPDATE ` + n.leases + ` SET ttl_ns = $4::bigint, expires_at = ` + expiresAt("$4::bigint") + `
WHERE key = $1 AND token = $2 AND id = $3 AND expires_at > clock_timestamp()
RETURNING owner, expires_at`,

		// Release keeps the row (its token is the key's high-water mark) and
		// marks it free. If a WaitChange marked the generation wanted, it
		// notifies, in the same statement; NOTIFY is delivered on commit.
		// Releases nobody waits for send nothing: a notifying transaction
		// holds PostgreSQL's global NOTIFY lock until its commit is done,
		// which would serialise every release on the server.
		//
		// The commit is asynchronous (synchronous_commit off for this
		// transaction only): a release lost in a crash only makes the key
		// look held until its TTL, and the next durable commit on the server
		// flushes it anyway.
		//
		// $1 key, $2 token, $3 id, $4 channel.
		release: `WITH rel AS (
	UPDATE ` + n.leases + ` SET expires_at = '-infinity'
	WHERE key = $1 AND token = $2 AND id = $3 AND expires_at > clock_timestamp()
	RETURNING key, wanted
)
SELECT CASE WHEN wanted THEN pg_notify($4::text, key) END, set_config('synchronous_commit', 'off', true) FROM rel`,

		get: `SELECT owner, token, ttl_ns, expires_at FROM ` + n.leases + `
WHERE key = $1 AND expires_at > clock_timestamp()`,

		list: `SELECT key, owner, token, ttl_ns, expires_at FROM ` + n.leases + `
WHERE starts_with(key, $1) AND expires_at > clock_timestamp() ORDER BY key`,

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
	}
}

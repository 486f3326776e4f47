package pgstore

// queries are the statements of one Store, with its table names filled in.
// Each operation is one statement, sent in one round trip (pgx prepares it
// once per connection and then only binds and executes).
type queries struct {
	acquire, renew, release, get, list, remaining string
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
		// $1 key, $2 id, $3 owner, $4 ttl in ns.
		acquire: `WITH cur AS MATERIALIZED (
	SELECT token, owner, ttl_ns, expires_at, expires_at > clock_timestamp() AS live
	FROM ` + n.leases + ` WHERE key = $1
), ins AS (
	INSERT INTO ` + n.leases + ` AS l (key, token, id, owner, ttl_ns, expires_at)
	SELECT $1::text, 1, $2::bytea, $3::text, $4::bigint, ` + expiresAt("$4::bigint") + `
	WHERE NOT EXISTS (SELECT FROM cur WHERE cur.live)
	ON CONFLICT (key) DO UPDATE SET
		token = l.token + 1, id = EXCLUDED.id, owner = EXCLUDED.owner, ttl_ns = EXCLUDED.ttl_ns,
		expires_at = ` + expiresAt("EXCLUDED.ttl_ns") + `
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
		// marks it free. NOTIFY is sent at commit, in the same statement.
		// The commit is asynchronous (synchronous_commit off for this
		// transaction only): a release lost in a crash only makes the key
		// look held until its TTL, and the next durable commit on the server
		// flushes it anyway. It also shortens the time the release holds
		// PostgreSQL's global NOTIFY lock, which is held through the commit.
		//
		// $1 key, $2 token, $3 id, $4 channel.
		release: `WITH rel AS (
	UPDATE ` + n.leases + ` SET expires_at = '-infinity'
	WHERE key = $1 AND token = $2 AND id = $3 AND expires_at > clock_timestamp()
	RETURNING key
)
SELECT pg_notify($4::text, key), set_config('synchronous_commit', 'off', true) FROM rel`,

		get: `SELECT owner, token, ttl_ns, expires_at FROM ` + n.leases + `
WHERE key = $1 AND expires_at > clock_timestamp()`,

		list: `SELECT key, owner, token, ttl_ns, expires_at FROM ` + n.leases + `
WHERE starts_with(key, $1) AND expires_at > clock_timestamp() ORDER BY key`,

		// How long the key stays held, on the server's clock; no row if free.
		remaining: `SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1e6)::bigint FROM ` + n.leases + `
WHERE key = $1 AND expires_at > clock_timestamp()`,
	}
}

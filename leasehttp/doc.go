// Package leasehttp serves any lease.Backend over HTTP (Server) and talks to
// such a server as a lease.Backend itself (Client), so the root lease.Client
// — waiting, background renewal, loss signalled by context — works across
// the network unchanged. A backend's lease.Watcher is served as a stream of
// Server-Sent Events, and the Client is a lease.Watcher over it.
//
// # API (v1)
//
// Bodies are JSON; POST bodies must be sent as Content-Type
// application/json and be at most 64 KiB (MaxBodyBytes; 1 MiB for a batch
// of renewals, MaxRenewBatchBodyBytes).
//
//	route                              body                          success                      failure
//	POST /v1/leases/{key}/acquire      {"owner","ttl_ms","wait_ms"}  200 lease (with id)          409 held (with "holder")
//	POST /v1/leases/{key}/renew        {"id","token","ttl_ms"}       200 lease (with id)          409 not_held
//	POST /v1/leases/{key}/release      {"id","token"}                200 {}                       409 not_held
//	GET  /v1/leases/{key}              –                             200 lease (no id)            404 not_found
//	GET  /v1/leases?prefix=P&limit=N&after=C                         200 {"leases":[…],"next"}    403 forbidden
//	GET  /v1/watch?prefix=P            –                             200 text/event-stream        403 forbidden, 429 too_many_watchers, 501 unsupported, 503 unavailable
//	GET  /v1/stats?prefix=P            –                             200 the server's figures
//	GET  /healthz                      –                             200 {"status":"ok"}
//	GET  /readyz                       –                             200 {"status":"ready"}       503 unavailable
//	GET  /metrics                      –                             Prometheus text format
//	GET  /v1/openapi.json              –                             200 this API as OpenAPI 3.1
//
// openapi.json (OpenAPI returns it) describes every route, body, status
// and error code above; the package's tests check every request they make
// and every answer they get against it, so it cannot drift from the Server.
// {key} is one percent-encoded path segment: a '/' inside a key travels as
// %2F (ServeMux matches the escaped segment and unescapes it), and a key
// that is "." or ".." as %2E or %2E%2E, since ServeMux would clean a literal
// dot segment away; a path with an empty or dot segment under /v1/ is 400.
// (ServeMux takes a segment that unescapes to "/" for a trailing slash, so
// the Server routes the key "/" itself.) A lease is
//
//	{"key":"jobs/nightly","owner":"host-42","token":7,"id":"9f…","ttl_ms":30000,"expires_at":"2026-12-02T10:00:00.000Z"}
//
// with token a JSON number (at most 2^53, exact in every JSON reader),
// expires_at RFC 3339 in UTC with milliseconds on the backend's clock, and
// id, the lease's secret, only in the answers to acquire and renew. A list
// is one page (lease.Page): at most limit leases (1 to 10,000; absent or 0,
// 1,000) after the key the cursor after names, in byte order, and next, the
// after of the following page, "" on the last. Every error is
//
//	{"error":{"code":"…","message":"…"}}
//
// and a held answer adds "holder":{"key","owner","token","expires_at"} when
// the holder is known. One table (errors.go) maps code, HTTP status and
// sentinel error, both ways:
//
//	held          409  lease.ErrHeld (the client returns a *lease.HeldError)
//	not_held      409  lease.ErrNotHeld
//	stale_token   409  lease.ErrStaleToken (used by fence's HTTP guard)
//	not_found     404  lease.ErrNotFound
//	invalid       400  lease.ErrInvalid (413 for a body over 64 KiB, 415 for a
//	                   wrong Content-Type or a Content-Encoding, 408 for a
//	                   body slower than the http.Server's ReadTimeout, 404
//	                   for an unknown route, 406 for a watch whose Accept
//	                   rules out text/event-stream,
//	                   405 with Allow for a method the path has no route for)
//	unauthorized  401  ErrUnauthorized
//	forbidden     403  ErrForbidden (also a Host refused, see Authentication)
//	too_many_watchers
//	              429  ErrTooManyWatchers (see Watching)
//	unsupported   501  errors.ErrUnsupported (a watch on a backend that
//	                   cannot; asking again will not help)
//	unavailable   503  lease.ErrUnavailable (backend failure, or shutting down)
//
// Input limits: keys 1–512 bytes of UTF-8 without control characters (also
// when percent-encoded), owner likewise (invalid UTF-8 or a \u escape of a
// lone surrogate is refused, not read as U+FFFD), ttl_ms 10 to 86 400 000,
// wait_ms 0 to 3 600 000 (MaxMaxWait), token 1 to 2^53, id 32 hex digits. Members must be spelled exactly, appear once, have
// the right JSON type; numbers must be whole, non-negative and written
// without fraction or exponent; nothing may follow the object. A route
// whose input is the path and the body (acquire, renew, release, get, POST
// /v1/renew) refuses a query parameter rather than drop it. Every such
// mistake is a 4xx with the error body; no input yields a 5xx. (A request
// line net/http itself cannot parse, such as a malformed %-escape, is
// refused by net/http with a plain-text 400 before the Server sees it.)
//
// # Waiting
//
// wait_ms > 0 makes acquire wait for a held key, at most the server's max
// wait (WithMaxWait, DefaultMaxWait = 30 s; larger values up to MaxMaxWait
// are capped, larger still refused with 400), and
// answer 409 held with the holder when the wait runs out. Waiters for one
// key are served first come, first served, without polling the backend in a
// loop: a backend that implements lease.WaitAcquirer (memstore, boltstore,
// etcdstore) queues them itself; for the others the server keeps a FIFO
// queue per key and only its head talks to the backend, woken by the
// backend's lease.Notifier if it has one, otherwise by a release passing
// through this server, the holder's expiry time, or a backoff that doubles
// from 5 ms to 500 ms. That queue orders the waiters of one server process;
// acquires with wait_ms 0 and other servers do not queue in it. A waiter
// whose client hangs up leaves the queue, and a lease granted to it at that
// moment is released at once (such requests are counted and logged with
// status 499, as nginx does). A grant decided just before the server saw the
// hang-up would still be answered to nobody, so Client.AcquireWait hangs up
// only its own side of the connection (a half-close) and reads the answer:
// 499 says nothing is held for it, and a lease that crossed the hang-up it
// releases at once. It does so in the background: its caller gets its
// context's error at once, however slow or hung the server. A wait longer
// than the server's max wait takes several requests; those that carry one
// "ticket" keep the wait's place in line from one to the next (see
// WithWaitGrace and docs/DESIGN.md), which Client.AcquireWait does. Close
// ends every pending wait with 503 so that
// http.Server.Shutdown can drain quickly. A waiting request has its wait
// added to the read and write deadlines of the http.Server serving it, so
// its ReadTimeout and WriteTimeout need not allow for waits.
//
// # Replicas of one store
//
// A Server given WithStoreID names its store in the StoreHeader
// (Lease-Store) header of every answer; lease serve gives its backend's
// StoreID, a random id kept in the store with what names it in its engine
// (etcdstore's prefix, pgstore's schema and table prefix, redisstore's
// namespace; boltstore's id alone). A Client given
// several servers takes the first store named for the service's and
// refuses an answer naming another, as a lost answer (lease.ErrUnavailable,
// moving on to the next server): a replica given another prefix would
// otherwise answer for a key held through the others as free, and so would
// a server over another data dir, database or Redis server.
//
// # Watching
//
// GET /v1/watch?prefix=P streams the backend's lease.Watcher as Server-Sent
// Events (the HTML standard's text/event-stream): first the current state,
// one held event per lease in key order, then one synced event, then every
// change. One message per event:
//
//	id: 7
//	event: acquired
//	data: {"key":"jobs/nightly","owner":"host-42","token":8,"ttl_ms":30000,"expires_at":"2026-12-02T10:00:00.000Z"}
//
// event is the lease.EventKind (held, synced, acquired, renewed, released,
// expired), data the lease as GET answers it, without its id (for released
// and expired, the lease that ended; for synced, {}). The stream starts
// with "retry: 1000" and sends a comment line ": ping" whenever it has been
// silent for the heartbeat (WithHeartbeat, DefaultHeartbeat = 15 s), so
// proxies keep it open and a client that stopped reading is found: each
// write must be taken within the heartbeat plus the http.Server's
// WriteTimeout (the heartbeat again without one) or the stream ends. The
// http.Server's read and write timeouts are moved forward as the stream
// goes, so they do not cut it. The answer's Lease-Heartbeat-Ms header
// (HeartbeatHeader) says the heartbeat, and the Client takes a stream that
// stays silent for MissedHeartbeats heartbeats plus SilenceSlack for
// broken (ErrUnavailable): a connection that stops delivering without
// closing is noticed within about two heartbeats.
//
// The prefix is scoped like a list's: narrowed to the credential's
// prefixes inside it (the snapshots of several then come as one, in key
// order, with one synced), 403 when it shares no key with them. One
// credential may have WithMaxWatchers streams open (DefaultMaxWatchers =
// 64; without credentials, all clients together); one more is 429
// too_many_watchers until one of them ends. A backend that is not a
// lease.Watcher answers 501 unsupported: list the prefix instead. The
// answer's headers wait for the backend's watch to begin (its first event,
// or its error): a watch the backend cannot begin now is answered 503
// unavailable, which moves a Client listing several replicas on to the
// next, as a failed request does.
//
// A stream ends with an end event (EndEvent; not "error", which an
// EventSource fires for its own connection errors, so a browser would lose
// the reason), whose data is the error body of an HTTP answer and which
// has no id:
//
//	event: end
//	data: {"error":{"code":"unavailable","message":"…"}}
//
// when the backend's watch breaks (the backend failed, or the stream fell
// so far behind that the backend would not keep its changes), when the
// server closes (Close ends every stream at once), and when SetCredentials
// removes or changes the credential the stream was opened with. In each
// case the client watches again and gets the current state; after an end
// event or a dropped connection an EventSource does so by itself after a
// second.
//
// No history is kept, so a stream cannot resume where another left off:
// event ids count the events of one stream from 1, and a request with
// Last-Event-ID gets a new stream that begins with the current state
// (with a comment saying so). The event with id 1 always begins a new
// picture: a client keeping the state of the prefix drops what it had and
// rebuilds it from the held events, and knows it is complete at synced.
// Nothing missed while away is replayed, but nothing is missing from the
// state after synced either.
//
// The Client's Watch reads the stream as it arrives, buffering up to
// WatchBuffer events after synced for a caller that has not taken them, and
// cuts off a caller further behind with an error matching
// lease.ErrUnavailable, as backends do. It does not reconnect by itself:
// lease.Follow over it does (a new stream from the current state after a
// pause, announced by a lease.Resync event).
//
// An error answered before the request's body was read (401, 403, 404, 405,
// 413 for a Content-Length over the limit, 415, a 400 for a bad key or
// path) closes the connection instead of reading the body, so a client
// trickling a body cannot hold the connection by it.
//
// # Authentication
//
// WithCredentials (usually from LoadCredentials) makes every /v1/leases,
// /v1/renew, /v1/watch and /v1/stats request need "Authorization: Bearer
// TOKEN". Tokens are compared as SHA-256 hashes
// with crypto/subtle against every credential, without stopping at a match.
// A missing or unknown token, or a request with more than one
// Authorization header, is 401 unauthorized; a key outside the
// credential's prefixes is 403 forbidden. A list whose prefix is within one
// of the credential's prefixes is served as asked; a wider prefix is
// narrowed to the credential's prefixes inside it (so "list everything"
// shows what the credential may see); a prefix sharing no key with them is
// 403. /healthz, /readyz, /metrics and /v1/openapi.json need no token:
// probes and scrapers rarely carry one, and they reveal no key, owner or
// token (metrics have no such labels, /readyz hides backend error text, the
// document is the same public text for everyone). Without credentials the
// server authorises every request, so it must then listen on loopback only
// (the lease serve command enforces that); and since a web page can reach
// loopback through DNS rebinding, under a name of its own, it then answers
// /v1/leases, /v1/renew, /v1/watch and /v1/stats only for a Host that is "localhost", a name under ".localhost", an
// address in 127.0.0.0/8 or ::1 (with or without port), or one allowed with
// WithAllowedHosts: any other Host is 403 forbidden.
//
// SetCredentials swaps in a new set of credentials while the server runs
// (lease serve does on SIGHUP): a request keeps the credential it was
// authorised with to its end, later requests see only the new set. Watch
// streams, which may last for days, are the exception: one whose
// credential the new set drops or gives other prefixes ends at its next
// event or heartbeat.
// ReadCredentialsFile also warns about a file that group or others may
// access and about tokens shorter than ShortToken.
//
// # Metrics
//
// Registered with WithRegisterer (default: a registry of the server's own
// with the Go and process collectors), served at /metrics:
//
//	lease_acquisitions_total{result="acquired|held|error"}
//	lease_renewals_total{result="renewed|not_held|error"}
//	lease_releases_total{result="released|not_held|error"}
//	lease_expirations_total        leases that expired without a release
//	lease_active_leases            leases granted or renewed here, not yet released or expired
//	lease_waiters                  acquire requests now waiting
//	lease_watchers                 watch streams now open
//	lease_http_request_duration_seconds{route,code}
//
// Requests refused before reaching the backend (400, 401, 403) show only in
// the duration histogram. An expiration is counted when a lease granted or
// renewed through this server is not released or renewed by its TTL plus
// 250 ms on this server's clock, or when a renew or release of it is
// refused, or when the key is granted anew while it is still tracked —
// whichever is seen first, once per lease. The server knows only its own
// traffic: with several servers in front of one backend each counts the
// leases that pass through it, and a holder renewing through another
// server looks expired to the first. lease_active_leases follows the same
// tracking. Route labels are patterns and codes are HTTP statuses: no key
// ever becomes a label value. A watch stream is observed in the duration
// histogram once, when it ends, with its whole length.
//
// # Client retries
//
// A request that provably never left (the connection could not be made) is
// retried for every call. Beyond that, up to 3 attempts in all, 25 ms then
// 100 ms apart, and only where repeating is safe:
//
//   - Get and List: after a lost answer or a 503.
//   - Renew: likewise; renewing again with the same token and ID only
//     extends the lease once more.
//   - Release: likewise, but a first attempt may have succeeded with its
//     answer lost, and then the retry is answered not_held; that error
//     still matches lease.ErrNotHeld and says an earlier attempt may have
//     released the lease.
//   - Acquire: never after a lost answer or a 503. It returns an error
//     matching lease.ErrUnavailable saying the outcome is unknown: the lease
//     may have been granted, and if so expires after its TTL.
//
// A Client given several endpoints (NewClient with comma-separated URLs:
// replicas of one service, such as lease serve processes over one etcd
// cluster) sends every request to the endpoint that last worked. A request
// that could not connect there, got no answer, or was answered 503, moves
// later requests on to the next endpoint in the list (wrapping around); the
// request itself is tried again there at once, under the rules above, and
// the backoff applies only after every endpoint has failed in turn (so up
// to 3 attempts per endpoint). An Acquire whose outcome is unknown is thus
// never sent to another replica either. A Renew or RenewBatch still
// unanswered after a third of its TTL (the shortest of a batch's) is also
// sent to the next endpoint, and the first answer that is not a failure
// is taken: a replica that takes a renewal and never answers (cut off from
// its engine by a link that drops everything) would otherwise keep it past
// the holder's safe deadline, though the next could renew it. Watch opens its stream the same
// way; a stream that breaks is not reopened, and the next Watch starts on
// the next endpoint if this one cannot be reached. The rules, and why they
// are safe, are in docs/DESIGN.md (Multi-endpoint clients).
//
// Every transport failure matches lease.ErrUnavailable. AcquireWait asks
// for up to WithWaitChunk (30 s) per request, or until just before its
// context's deadline, and asks again while the key is held; a cancelled
// context cancels the request, and the server then releases anything it
// granted at that moment (the error also matches lease.ErrUnavailable and
// says the outcome is unknown, since the answer may have been on its way).
// A server that answers held at once is asked again after a backoff of 5 ms
// doubling to 500 ms. TTLs are sent in whole milliseconds, rounded up.
// Watch retries opening its stream as Get does; a stream that breaks is
// not reopened (see Watching).
package leasehttp

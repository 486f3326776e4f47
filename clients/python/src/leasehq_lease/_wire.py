"""What the sync and asyncio clients share: the API's bodies and paths, the
checks of their input, the lease types, and the I5 deadline arithmetic. No I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ._errors import InvalidError, UnavailableError, UnexpectedAnswerError, is_token, load_json, parse_time, quote

if TYPE_CHECKING:
    from datetime import datetime

MIN_TTL: Final = 0.01
"""The shortest TTL a server grants, in seconds (10 ms)."""
MAX_TTL: Final = 86_400.0
"""The longest TTL a server grants, in seconds (24 h)."""
MAX_NAME_BYTES: Final = 512
"""Keys and owners are 1 to 512 bytes of UTF-8."""
DEFAULT_PAGE_LIMIT: Final = 1000
MAX_PAGE_LIMIT: Final = 10_000
MAX_RENEW_BATCH: Final = 256
"""The most renewals one POST /v1/renew takes."""
RENEW_BATCH_PATH: Final = "/v1/renew"
PREFER_MINIMAL: Final = "return=minimal"
"""The Prefer header (RFC 7240) every POST /v1/renew carries: a renewed lease
is then answered with its TTL and expiry only (renew_results), the rest
being the request's. A server from before it answers in full."""
WAIT_CHUNK: Final = 30.0
"""The longest wait one acquire request asks for: a server waits at most 30 s by default."""
DRIFT_FRACTION: Final = 0.01
DRIFT_MIN: Final = 0.002
"""The default drift margin, the Go client's: 1% of the TTL + 2 ms."""


class Lease(NamedTuple):
    """A lease as Get, List and watch events show it: never its secret id."""

    key: str
    owner: str
    token: int
    ttl: float
    """The TTL it was granted or last renewed for, in seconds."""
    expires_at: datetime
    """When it expires unless renewed, on the server's clock (UTC)."""


class LeasePage(NamedTuple):
    """One page of a list: the leases, and the cursor of the next page ("" on the last)."""

    leases: list[Lease]
    next: str


class Granted(NamedTuple):
    """A lease as acquire and renew answer it: with its id, which proves holding (I4)."""

    lease: Lease
    id: str


def check_name(what: str, name: object) -> str:
    """Checks a key, owner or prefix as the server does: 1-512 bytes of UTF-8 without control characters."""
    if not isinstance(name, str):
        raise InvalidError(f"lease: {what} must be a str, got {type(name).__name__}")
    if 0 < len(name) <= MAX_NAME_BYTES and name.isascii() and name.isprintable():
        return name  # the common case: printable ASCII, one byte a character
    try:
        n = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidError(f"lease: {what} is not valid Unicode") from None
    if n == 0 or n > MAX_NAME_BYTES:
        raise InvalidError(f"lease: {what} must be 1 to {MAX_NAME_BYTES} bytes, got {n}")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        raise InvalidError(f"lease: {what} {name!r} contains a control character")
    return name



def is_digits(s: str) -> bool:
    """Whether s is one or more ASCII digits: str.isdigit() also holds for
    "²" and other Unicode digits, some of which int() refuses."""
    return s.isascii() and s.isdigit()


def check_ttl(ttl: object) -> float:
    """Checks a TTL in seconds: 0.01 to 86400."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not (MIN_TTL <= ttl <= MAX_TTL):
        raise InvalidError(f"lease: ttl must be {MIN_TTL} to {MAX_TTL:g} seconds, got {ttl!r}")
    return float(ttl)


class DriftMargin(NamedTuple):
    """How much earlier than the server a client gives a lease up: fraction x TTL + seconds."""

    fraction: float = DRIFT_FRACTION
    seconds: float = DRIFT_MIN

    def of(self, ttl: float) -> float:
        return self.fraction * ttl + self.seconds


def check_margin(m: DriftMargin) -> DriftMargin:
    if not (0 <= m.fraction < 0.5) or not (0 <= m.seconds < MAX_TTL):
        raise InvalidError(f"lease: drift margin needs 0 <= fraction < 0.5 and seconds >= 0, got {m.fraction}, {m.seconds}")
    return m


def check_usable(margin: DriftMargin, ttl: float) -> None:
    """A TTL the margin leaves at least half of."""
    if margin.of(ttl) > ttl / 2:
        raise InvalidError(f"lease: ttl {ttl} s is too short for the drift margin of {margin.of(ttl)} s (at most half of it)")


def default_owner() -> str:
    """HOSTNAME-PID, as the Go client's lease.DefaultOwner."""
    import os
    import socket

    try:
        host = socket.gethostname() or "unknown-host"
    except OSError:
        host = "unknown-host"
    return f"{host}-{os.getpid()}"


def jittered(s: float) -> float:
    """s scaled by a random factor in [0.9, 1.1)."""
    import random

    return s * (0.9 + 0.2 * random.random())


_SAFE: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
_SAFE_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")


def key_path(key: str, action: str = "") -> str:
    """/v1/leases/{key}[/action], the key one percent-encoded segment (a "/" as
    %2F, a key "." or ".." as %2E)."""
    if key in (".", ".."):
        seg = "%2E" * len(key)
    elif _SAFE_CHARS.issuperset(key):
        seg = key
    else:
        seg = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in key.encode("utf-8"))
    return f"/v1/leases/{seg}/{action}" if action else f"/v1/leases/{seg}"


def query(params: dict[str, str]) -> str:
    parts = []
    for k, v in params.items():
        parts.append(k + "=" + "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in v.encode("utf-8")))
    return "?" + "&".join(parts) if parts else ""


def dumps(v: Any) -> bytes:
    import json

    return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def loads_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        v = load_json(body)
    except ValueError:
        raise UnexpectedAnswerError(f"lease: {what}: the answer is not JSON: {body[:200]!r}") from None
    if not isinstance(v, dict):
        raise UnexpectedAnswerError(f"lease: {what}: the answer is not a JSON object: {body[:200]!r}")
    return v


def lease_of(v: object, what: str) -> Lease:
    """A lease from its JSON, checked as a lease server writes it."""
    if isinstance(v, dict):
        key, owner, token, ttl_ms, exp = v.get("key"), v.get("owner"), v.get("token"), v.get("ttl_ms"), parse_time(v.get("expires_at"))
        if isinstance(key, str) and isinstance(owner, str) and is_token(token) and is_ttl_ms(ttl_ms) and exp is not None:
            assert isinstance(token, int) and isinstance(ttl_ms, int)
            return Lease(key, owner, token, ttl_ms / 1000.0, exp)
    raise UnexpectedAnswerError(f"lease: {what}: not a lease: {str(v)[:200]}")


def is_ttl_ms(v: object) -> bool:
    """Whether v is a lease's ttl_ms as a server writes it: an int of 0 to 24 h."""
    return type(v) is int and 0 <= v <= MAX_TTL * 1000


def granted_of(v: object, what: str) -> Granted:
    """A lease with its id, as acquire and renew answer."""
    lease = lease_of(v, what)
    assert isinstance(v, dict)
    lid = v.get("id")
    if not isinstance(lid, str) or len(lid) != 32:
        raise UnexpectedAnswerError(f"lease: {what}: the answer has no lease id")
    return Granted(lease, lid)


def acquire_body(owner: str | bytes, ttl: float, wait: float, ticket: str = "", last: bool = False) -> bytes:
    """The body of an acquire; owner as a str, or already as its JSON. A
    request that waits carries its wait's ticket, if given (32 hex digits,
    the same for every request of one wait, so that the server keeps the
    wait's place in line between them), and last when the wait ends with
    this request's wait_ms."""
    wait_ms = round(wait * 1000)
    body = b'{"owner":%s,"ttl_ms":%d,"wait_ms":%d' % (
        owner if isinstance(owner, bytes) else dumps(owner), ttl_ms(ttl), wait_ms
    )
    if ticket and wait_ms > 0:
        body += b',"ticket":"%s"' % ticket.encode()
        if last:
            body += b',"last":true'
    return body + b"}"


def ttl_ms(ttl: float) -> int:
    return max(10, round(ttl * 1000))


def release_body(g: Granted) -> bytes:
    return b'{"id":"%s","token":%d}' % (g.id.encode(), g.lease.token)


def renew_body(g: Granted, ttl: float) -> bytes:
    return b'{"id":"%s","token":%d,"ttl_ms":%d}' % (g.id.encode(), g.lease.token, ttl_ms(ttl))


def renew_batch_body(items: list[tuple[Granted, float]]) -> bytes:
    return dumps(
        {
            "renewals": [
                {"key": g.lease.key, "id": g.id, "token": g.lease.token, "ttl_ms": ttl_ms(ttl)} for g, ttl in items
            ]
        }
    )


def renew_results(body: bytes, asked: list[Granted]) -> list[Granted | str]:
    """The results of POST /v1/renew for the leases asked, in order: each
    renewed lease a Granted, each refusal its error code ("unavailable" for a
    result that is none of these). A renewed lease is {"lease":{…}}, or,
    answered to Prefer: return=minimal, {"ttl_ms":…,"expires_at":…}: the
    lease asked with that TTL and expiry. A result that is more than one of a
    lease, a TTL and expiry, and an error, or a TTL without an expiry (or the
    reverse), makes the whole answer an UnexpectedAnswerError, as a malformed
    lease does; as the Go client's readRenewAnswer."""
    v = loads_object(body, "renew")
    results = v.get("results")
    if not isinstance(results, list) or len(results) != len(asked):
        raise UnavailableError(f"lease: renew: the answer has no {len(asked)} results")
    out: list[Granted | str] = []
    for g, r in zip(asked, results):
        if not isinstance(r, dict):
            out.append("unavailable")
            continue
        full, minimal, error = "lease" in r, "ttl_ms" in r or "expires_at" in r, "error" in r
        if full + minimal + error > 1:
            raise UnexpectedAnswerError(
                f"lease: renew: the result for {quote(g.lease.key)} is more than one of a lease,"
                f" a renewal's TTL and expiry, and an error: {str(r)[:200]}"
            )
        if full:
            out.append(granted_of(r["lease"], "renew"))
        elif minimal:
            ttl, exp = r.get("ttl_ms"), parse_time(r.get("expires_at"))
            if not is_ttl_ms(ttl) or exp is None:
                raise UnexpectedAnswerError(
                    f"lease: renew: the result for {quote(g.lease.key)} is not a renewal's TTL and expiry: {str(r)[:200]}"
                )
            assert isinstance(ttl, int)
            out.append(Granted(g.lease._replace(ttl=ttl / 1000.0, expires_at=exp), g.id))
        elif isinstance(r.get("error"), dict):
            code = r["error"].get("code")
            out.append(code if isinstance(code, str) else "unavailable")
        else:
            out.append("unavailable")
    return out


def list_path(prefix: str, limit: int | None, after: str) -> str:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_LIMIT):
        raise InvalidError(f"lease: limit must be 1 to {MAX_PAGE_LIMIT}, got {limit!r}")
    if not isinstance(after, str):
        raise InvalidError("lease: after must be a str: the next of the page before")
    params: dict[str, str] = {}
    if prefix:
        params["prefix"] = prefix
    if limit is not None:
        params["limit"] = str(limit)
    if after:
        params["after"] = after
    return "/v1/leases" + query(params)


def page_of(body: bytes) -> LeasePage:
    v = loads_object(body, "list")
    leases, nxt = v.get("leases"), v.get("next", "")
    if not isinstance(leases, list) or not isinstance(nxt, str):
        raise UnexpectedAnswerError(f"lease: list: not a page: {body[:200]!r}")
    return LeasePage([lease_of(x, "list") for x in leases], nxt)


def same_lease(a: Granted, b: Granted) -> bool:
    """Whether a renewal answered with the lease it renewed: same key, token and id."""
    return a.lease.key == b.lease.key and a.lease.token == b.lease.token and a.id.lower() == b.id.lower()

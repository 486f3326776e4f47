"""Errors as a small class tree, one class per code of the server's error table
(leasehttp/errors.go, docs/DESIGN.md), plus the client's own: the loss and the
release of a hold, and an answer no lease server gives. Every class has a
``code``; catch a class, or ``LeaseError`` and look at ``code``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Final, NamedTuple

if TYPE_CHECKING:
    from datetime import datetime

MAX_TOKEN: Final = 2**53
"""The largest token a server issues: 2^53, exact as a JSON number and a float."""


class Holder(NamedTuple):
    """Who holds a key, as a ``held`` answer names them."""

    key: str
    owner: str
    token: int
    expires_at: datetime
    """When the holder's lease expires, on the server's clock (UTC)."""


class LeaseError(Exception):
    """The base of every error this package raises."""

    code: str = "unexpected"
    """What went wrong, as the server's error table names it."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        """The HTTP status of the answer, when the error is one."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt without __init__, whose arguments differ by class: pickle
        # called cls(*args) with the message alone, which LeaseLostError and
        # LeaseReleasedError refused, so that they could not cross processes
        # (multiprocessing, concurrent.futures, a task queue's results).
        return (_rebuilt, (type(self), self.args), self.__dict__)


def _rebuilt(cls: type[LeaseError], args: tuple[Any, ...]) -> LeaseError:
    """An error of class cls with args, its attributes to come from pickle's state."""
    return cls.__new__(cls, *args)


class HeldError(LeaseError):
    """The key is held by someone else (409 ``held``); ``holder`` names them when the server knows."""

    code = "held"

    def __init__(self, message: str, holder: Holder | None = None, *, status: int | None = None) -> None:
        super().__init__(message, status=status)
        self.holder = holder


class NotHeldError(LeaseError):
    """The lease is no longer held: it expired, was released or was superseded (409 ``not_held``)."""

    code = "not_held"


class StaleTokenError(LeaseError):
    """A guard refused a write: its token is older than the newest the resource
    accepted (409 ``stale_token`` from a fenced service). The refused write
    changed nothing."""

    code = "stale_token"

    def __init__(
        self,
        message: str,
        *,
        resource: str | None = None,
        token: int | None = None,
        highest: int | None = None,
        mode: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, status=status)
        self.resource = resource
        self.token = token
        self.highest = highest
        self.mode = mode


class NotFoundError(LeaseError):
    """No unexpired lease on the key (404 ``not_found``)."""

    code = "not_found"


class InvalidError(LeaseError, ValueError):
    """A malformed request or argument (400 ``invalid``; also 405, 408, 413, 415):
    asking again will not help. It is also a ValueError."""

    code = "invalid"


class UnauthorizedError(LeaseError):
    """No bearer token, or one the server does not know (401 ``unauthorized``)."""

    code = "unauthorized"


class ForbiddenError(LeaseError):
    """The credential does not cover the key, or the server refuses this Host (403 ``forbidden``)."""

    code = "forbidden"


class TooManyWatchersError(LeaseError):
    """The credential has as many watch streams open as the server allows (429 ``too_many_watchers``)."""

    code = "too_many_watchers"


class UnsupportedError(LeaseError):
    """The server's backend cannot do what was asked, such as watch (501 ``unsupported``)."""

    code = "unsupported"


class UnavailableError(LeaseError):
    """The server or its backend could not answer (503 ``unavailable``, any 5xx, the
    network, a broken watch stream): the outcome of a request that changes state
    is unknown. A watch refused 429 by a rate limit in front of the server (an
    answer without the API's error body, or with a code other than
    ``too_many_watchers``) is one too, a break: its cause is the answer's
    UnexpectedAnswerError, and ``retry_after`` the seconds its Retry-After
    asked for (at most a minute), which the watch pauses for at least."""

    code = "unavailable"
    retry_after: float = 0.0
    """Seconds to wait before watching again, as a rate limit's 429 said (0: it did not)."""


class LeaseLostError(LeaseError):
    """The client can no longer be sure it holds the lease: the safe deadline (send
    time of the last successful acquire or renew + TTL - drift margin) passed
    without a renewal, or the server said the lease is gone (I5)."""

    code = "lost"

    def __init__(self, key: str, token: int, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.token = token


class LeaseReleasedError(LeaseError):
    """The hold was released; work under it must stop."""

    code = "released"

    def __init__(self, key: str, token: int) -> None:
        super().__init__(f"lease: {key!r} (token {token}) was released")
        self.key = key
        self.token = token


class UnexpectedAnswerError(LeaseError):
    """An answer no lease server gives: a proxy's error page, another service at that URL."""

    code = "unexpected"


def quote(s: str) -> str:
    """s as a JSON string, for messages."""
    import json

    return json.dumps(s, ensure_ascii=False)


def is_token(v: object) -> bool:
    """Whether v is a token a server can have issued: an int in [1, 2^53]."""
    return type(v) is int and 1 <= v <= MAX_TOKEN


def parse_time(v: object) -> datetime | None:
    """An RFC 3339 time as the server writes it, or None. Its offset is part
    of it, as in Go's time.RFC3339: a time without one (which fromisoformat
    takes, as local time) cannot be compared with the clock's now in UTC,
    and raised TypeError where a semaphore waited on a holder's expiry."""
    if not isinstance(v, str):
        return None
    from datetime import datetime

    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def _holder(v: object) -> Holder | None:
    if not isinstance(v, dict):
        return None
    key, owner, token, at = v.get("key"), v.get("owner"), v.get("token"), parse_time(v.get("expires_at"))
    if not isinstance(key, str) or not isinstance(owner, str) or not is_token(token) or at is None:
        return None
    assert isinstance(token, int)
    return Holder(key, owner, token, at)


def _stale(m: str, d: dict[str, Any], status: int | None) -> LeaseError:
    tok, hi, res = d.get("token"), d.get("highest"), d.get("resource")
    return StaleTokenError(
        m,
        resource=res if isinstance(res, str) else None,
        token=tok if is_token(tok) else None,
        highest=hi if type(hi) is int else None,
        status=status,
    )


# BY_CODE makes the error of each code the server may send: the Go table's
# rows, in its order. tests/test_errors.py checks it against the OpenAPI
# document's codes.
BY_CODE: Final[dict[str, Callable[[str, dict[str, Any], int | None], LeaseError]]] = {
    "held": lambda m, d, s: HeldError(m, _holder(d.get("holder")), status=s),
    "not_held": lambda m, d, s: NotHeldError(m, status=s),
    "stale_token": _stale,
    "not_found": lambda m, d, s: NotFoundError(m, status=s),
    "invalid": lambda m, d, s: InvalidError(m, status=s),
    "unauthorized": lambda m, d, s: UnauthorizedError(m, status=s),
    "forbidden": lambda m, d, s: ForbiddenError(m, status=s),
    "too_many_watchers": lambda m, d, s: TooManyWatchersError(m, status=s),
    "unsupported": lambda m, d, s: UnsupportedError(m, status=s),
    "unavailable": lambda m, d, s: UnavailableError(m, status=s),
}


def load_json(body: bytes | str) -> Any:
    """json.loads, whose every failure is a ValueError: it raises RecursionError,
    no ValueError, for a text nested deeper than the interpreter's stack
    (100,000 "[" from a broken or hostile server), which escaped the clients'
    handling of answers that are not JSON and ended the thread renewing
    every hold."""
    import json

    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def _detail(body: bytes | str) -> dict[str, Any] | None:
    """The error object of an error body {"error":{...}}, or None."""
    try:
        v = load_json(body)
    except ValueError:
        return None
    d = v.get("error") if isinstance(v, dict) else None
    return d if isinstance(d, dict) else None


def error_from_answer(status: int, body: bytes) -> LeaseError:
    """The class of an error answer: by the code of the API's error body
    ``{"error":{"code","message",...}}`` when it is one of the table's; else
    (no such body, or a code this client does not know, a newer server's) by
    the status alone, as every client does (docs/DESIGN.md, below the error
    table): a 5xx is UnavailableError, 400, 405, 408, 413 and 415
    InvalidError, 401 UnauthorizedError, 403 ForbiddenError, and any other
    UnexpectedAnswerError; never a 404, 409 or 429 class, which a proxy's
    page could not mean."""
    detail = _detail(body)
    if detail is not None:
        code = detail.get("code")
        msg = detail.get("message")
        message = msg if isinstance(msg, str) and msg else f"lease: HTTP {status} {code}"
        if isinstance(code, str) and code in BY_CODE:
            return BY_CODE[code](message, detail, status)
        what = f"lease: HTTP {status} with error code {code!r}, which this client does not know: {message}"
    else:
        text = body[:200].decode("utf-8", "replace")
        what = f"lease: HTTP {status} without the API's error body: {text!r}"
    if status >= 500:
        return UnavailableError(what, status=status)
    if status in (400, 405, 408, 413, 415):
        return InvalidError(what, status=status)
    if status == 401:
        return UnauthorizedError(what, status=status)
    if status == 403:
        return ForbiddenError(what, status=status)
    return UnexpectedAnswerError(what, status=status)


def error_from_event(what: str, data: str) -> LeaseError:
    """The class of the ``end`` event that ends a watch stream (an older
    server's ``error``; its data an error body): by its code, else an
    UnavailableError, since the stream broke."""
    d = _detail(data) or {}
    code = d.get("code")
    said = d.get("message") if isinstance(d.get("message"), str) and d.get("message") else repr(data[:200])
    message = f"lease: {what}: the server ended the stream ({code if isinstance(code, str) else 'no code'}): {said}"
    if isinstance(code, str) and code in BY_CODE:
        return BY_CODE[code](message, d, None)
    return UnavailableError(message)

"""The error classes: one per code of the server's table, mirrored from the
OpenAPI document, and answers without the API's body judged by status as
the Go client judges them."""

from __future__ import annotations

import json
import re

import pytest

from leasehq_lease import (
    ForbiddenError,
    HeldError,
    InvalidError,
    LeaseError,
    NotFoundError,
    NotHeldError,
    StaleTokenError,
    TooManyWatchersError,
    UnauthorizedError,
    UnavailableError,
    UnexpectedAnswerError,
    UnsupportedError,
)
from leasehq_lease._errors import BY_CODE, error_from_answer, error_from_event

from conftest import REPO

CLASSES = {
    "held": HeldError, "not_held": NotHeldError, "stale_token": StaleTokenError, "not_found": NotFoundError,
    "invalid": InvalidError, "unauthorized": UnauthorizedError, "forbidden": ForbiddenError,
    "too_many_watchers": TooManyWatchersError, "unsupported": UnsupportedError, "unavailable": UnavailableError,
}


def openapi_codes() -> set[str]:
    doc = json.loads((REPO / "leasehttp" / "openapi.json").read_text())
    codes: set[str] = set()

    def walk(v: object) -> None:
        if isinstance(v, dict):
            code = v.get("properties", {}).get("code") if isinstance(v.get("properties"), dict) else None
            if isinstance(code, dict) and isinstance(code.get("enum"), list):
                codes.update(code["enum"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(doc)
    return codes


def test_every_code_of_the_api_has_its_class() -> None:
    # Go's table (leasehttp/errors.go), row for row; the OpenAPI document
    # lists the lease server's codes, all but stale_token (a fenced service's).
    go = re.findall(r'\{"(\w+)", http\.Status', (REPO / "leasehttp" / "errors.go").read_text())
    assert list(BY_CODE) == go
    codes = openapi_codes()
    assert codes and set(BY_CODE) - codes == {"stale_token"}
    for code, cls in CLASSES.items():
        e = error_from_answer(409, json.dumps({"error": {"code": code, "message": "m"}}).encode())
        assert type(e) is cls and e.code == code and e.status == 409 and str(e) == "m"
        assert isinstance(e, LeaseError)


def test_held_names_the_holder_and_stale_its_tokens() -> None:
    e = error_from_answer(409, b'{"error":{"code":"held","message":"m","holder":{"key":"k","owner":"o","token":7,"expires_at":"2026-01-02T03:04:05.678Z"}}}')
    assert isinstance(e, HeldError) and e.holder is not None and (e.holder.owner, e.holder.token) == ("o", 7)
    assert e.holder.expires_at.year == 2026 and e.holder.expires_at.microsecond == 678000
    s = error_from_answer(409, b'{"error":{"code":"stale_token","message":"m","token":3,"highest":5,"resource":"r"}}')
    assert isinstance(s, StaleTokenError) and (s.token, s.highest, s.resource) == (3, 5, "r")


@pytest.mark.parametrize(
    "status,cls",
    [(502, UnavailableError), (503, UnavailableError), (400, InvalidError), (413, InvalidError), (401, UnauthorizedError),
     (403, ForbiddenError), (404, UnexpectedAnswerError), (409, UnexpectedAnswerError), (429, UnexpectedAnswerError)],
)
def test_answers_without_the_body_by_status(status: int, cls: type) -> None:
    e = error_from_answer(status, b"<html>proxy</html>")
    assert type(e) is cls and e.status == status


def test_error_answers_as_every_client_reads_them() -> None:
    # The cases leasehttp's and the TypeScript client's tests read too: a
    # code of the table wins; a code this client does not know goes by the
    # status, as an answer without the API's body does.
    doc = json.loads((REPO / "leasehttp" / "testdata" / "error_answers.json").read_text())
    assert doc["cases"]
    for c in doc["cases"]:
        e = error_from_answer(c["status"], c["body"].encode())
        want = UnexpectedAnswerError if c["want"] == "unexpected" else CLASSES[c["want"]]
        assert type(e) is want, (c, e)
        assert e.status == c["status"]


def test_unknown_codes() -> None:
    assert type(error_from_event("w", "not json")) is UnavailableError
    assert type(error_from_event("w", '{"error":{"code":"forbidden","message":"m"}}')) is ForbiddenError


@pytest.mark.parametrize("at", ["2026-01-02T03:04:05", "2026-01-02"])
def test_a_time_without_its_offset_is_no_time(at: str) -> None:
    # fromisoformat takes them, as naive local times, which cannot be
    # compared with an aware now: a semaphore waiting on such a holder's
    # expiry raised TypeError. Go's time.RFC3339 refuses them too.
    from leasehq_lease._election import SemaphoreBase
    from leasehq_lease._wire import granted_of

    lease = {"key": "k", "owner": "o", "token": 7, "ttl_ms": 1000, "expires_at": at, "id": "a" * 32}
    e = error_from_answer(409, json.dumps({"error": {"code": "held", "message": "m", "holder": lease}}).encode())
    assert isinstance(e, HeldError) and e.holder is None
    assert SemaphoreBase._until_free(e, 5.0) == 5.0
    with pytest.raises(UnexpectedAnswerError):
        granted_of(lease, "acquire")


def test_every_error_crosses_processes() -> None:
    # multiprocessing, concurrent.futures and task queues pickle the error
    # a worker raised. Pickle made it again with the message alone, which
    # LeaseLostError and LeaseReleasedError refused (TypeError: missing
    # arguments): a pool's worker that lost its lease could not report it.
    import pickle
    from datetime import datetime, timezone

    from leasehq_lease import Holder, LeaseLostError, LeaseReleasedError

    holder = Holder("k", "o", 7, datetime(2026, 1, 2, tzinfo=timezone.utc))
    errors: list[LeaseError] = [
        LeaseLostError("k", 7, 'lease: lost "k" (token 7): no renewal'),
        LeaseReleasedError("k", 7),
        HeldError("m", holder, status=409),
        StaleTokenError("m", resource="r", token=3, highest=5, mode="strict", status=409),
        UnexpectedAnswerError("m", status=200),
        *(cls("m", status=400) for cls in CLASSES.values() if cls not in (HeldError, StaleTokenError)),
    ]
    for e in errors:
        got = pickle.loads(pickle.dumps(e))
        assert type(got) is type(e) and str(got) == str(e) and got.code == e.code, (e, got)
        assert vars(got) == vars(e), (e, vars(got))

"""FencedResource: a value guarded by fencing tokens in this process (I6), as
Go's fence.Memory guards one."""

from __future__ import annotations

import threading
from typing import Callable, Final, Generic, NamedTuple, TypeVar

from ._errors import MAX_TOKEN, InvalidError, StaleTokenError, is_token, quote

T = TypeVar("T")

AT_LEAST: Final = "at-least"
STRICT: Final = "strict"


def check_mode(mode: object) -> str:
    if mode not in (AT_LEAST, STRICT):
        raise InvalidError(f"lease: unknown fence mode {mode!r}; want 'at-least' or 'strict'")
    assert isinstance(mode, str)
    return mode


def check_token(token: object) -> int:
    if not is_token(token):
        raise InvalidError(f"lease: fencing token {token!r} is outside [1, {MAX_TOKEN}]")
    assert isinstance(token, int)
    return token


def admits(mode: str, token: int, highest: int) -> bool:
    """Whether mode admits token over the highest accepted: >= (at-least) or > (strict)."""
    return token > highest if mode == STRICT else token >= highest


class Snapshot(NamedTuple, Generic[T]):
    """A FencedResource's value and the highest token it accepted (0: none)."""

    value: T
    last_token: int


class FencedResource(Generic[T]):
    """A value guarded by fencing tokens: a write is accepted only if the mode
    admits its token, which is then recorded as the highest accepted; a
    refused write raises StaleTokenError and changes nothing. "at-least" (the
    default) admits token >= highest, so one holder may write many times;
    "strict" only token > highest, each token once (the seed's rule). Check
    and write are one step under a lock, safe across threads."""

    def __init__(self, initial: T = None, *, mode: str = AT_LEAST, name: str = "resource") -> None:  # type: ignore[assignment]
        self.mode: str = check_mode(mode)
        self.name = name
        self._value = initial
        self._highest = 0
        self._lock = threading.Lock()
        self._updating: int | None = None  # the thread running f, if any

    def write(self, token: int, value: T) -> None:
        """Stores value if token is admitted, and records token as the highest accepted."""
        self.update(token, lambda _: value)

    def update(self, token: int, f: Callable[[T], T]) -> None:
        """Replaces the value with f(old) if token is admitted, atomically with the check. If f raises, nothing changes.
        f must not write this resource: a nested write or update raises InvalidError."""
        check_token(token)
        if self._updating == threading.get_ident():
            raise InvalidError(f"lease: {quote(self.name)} written from inside its own update")
        with self._lock:
            if not admits(self.mode, token, self._highest):
                raise StaleTokenError(
                    f"lease: stale token {token} for {quote(self.name)}: highest accepted is {self._highest} (mode {self.mode})",
                    resource=self.name, token=token, highest=self._highest, mode=self.mode,
                )
            self._updating = threading.get_ident()
            try:
                value = f(self._value)
            finally:
                self._updating = None
            self._value = value
            self._highest = token

    def read(self) -> Snapshot[T]:
        """The value and the highest token accepted so far (0: none)."""
        with self._lock:
            return Snapshot(self._value, self._highest)

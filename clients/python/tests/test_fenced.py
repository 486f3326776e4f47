"""FencedResource: Go's fence.Memory rules (I6), in process."""

from __future__ import annotations

import threading

import pytest

from leasehq_lease import MAX_TOKEN, FencedResource, InvalidError, StaleTokenError


def test_at_least_admits_the_same_token_again_strict_does_not() -> None:
    r: FencedResource[str | None] = FencedResource()
    assert r.mode == "at-least" and r.read() == (None, 0)
    r.write(3, "a")
    r.write(3, "b")
    assert r.read() == ("b", 3)
    with pytest.raises(StaleTokenError) as e:
        r.write(2, "late")
    assert (e.value.token, e.value.highest, e.value.mode, e.value.code) == (2, 3, "at-least", "stale_token")
    assert r.read() == ("b", 3)

    s: FencedResource[int] = FencedResource(0, mode="strict")
    s.write(1, 1)
    with pytest.raises(StaleTokenError):
        s.write(1, 2)
    s.write(2, 2)
    assert s.read() == (2, 2)


def test_update_is_atomic_and_a_raising_function_changes_nothing() -> None:
    r: FencedResource[int] = FencedResource(0)

    def boom(_: int) -> int:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        r.update(1, boom)
    assert r.read() == (0, 0)
    def add() -> None:
        for _ in range(1000):
            r.update(5, lambda v: v + 1)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r.read() == (4000, 5)


@pytest.mark.parametrize("token", [0, -1, MAX_TOKEN + 1, 1.5, "1", True])
def test_tokens_outside_the_range_are_invalid(token: object) -> None:
    with pytest.raises(InvalidError):
        FencedResource().write(token, 1)  # type: ignore[arg-type]


def test_unknown_mode_is_invalid() -> None:
    with pytest.raises(InvalidError):
        FencedResource(mode="loose")


def test_a_write_from_inside_its_own_update_is_refused() -> None:
    # The lock is not reentrant: a nested write from f's thread waited for
    # itself forever. It is refused instead, and nothing changes.
    r: FencedResource[str] = FencedResource("initial")
    r.write(5, "five")
    result: list[BaseException | None] = []

    def six(_: str) -> str:
        r.write(10, "ten")
        return "six"

    def nested() -> None:
        try:
            r.update(6, six)
            result.append(None)
        except BaseException as e:  # noqa: BLE001
            result.append(e)

    t = threading.Thread(target=nested, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "a write from inside update waited for itself"
    assert isinstance(result[0], InvalidError)
    assert r.read() == ("five", 5)
    r.write(7, "seven")
    assert r.read() == ("seven", 7)

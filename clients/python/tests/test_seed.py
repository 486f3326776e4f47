"""The seed article's scenario through a real server: A acquires (token 1),
stalls past its TTL (its network frozen: no renewal reaches the server), B
acquires (token 2) and writes; A's late write is refused. It ends as the
seed does: value written-by-b, last token 2. The seed's own guard is the
strict one; at-least gives the same end."""

from __future__ import annotations

from typing import Callable

import pytest

from leasehq_lease import FencedResource, LeaseClient, StaleTokenError

from conftest import Proxy, Server, unique, wait_for


@pytest.mark.parametrize("mode", ["strict", "at-least"])
def test_seed_scenario(server: Server, proxy_to: Callable[[Server], Proxy], mode: str) -> None:
    resource: FencedResource[str] = FencedResource("initial", mode=mode)
    net = proxy_to(server)
    a = LeaseClient(net.url, owner="worker-a", timeout=0.5)
    b = LeaseClient(server.url, owner="worker-b")
    key = unique("job")
    hold_a = a.acquire(key, ttl=0.5)
    net.frozen.set()  # A stalls: nothing it sends arrives
    assert hold_a.lost.wait(2), "A's hold did not report the loss at its deadline"
    wait_for("the server to expire A's lease", lambda: b.get(key) is None)
    with b.acquire(key, 5.0) as hold_b:
        assert hold_b.token > hold_a.token
        resource.write(hold_b.token, "written-by-b")
        with pytest.raises(StaleTokenError) as e:
            resource.write(hold_a.token, "written-by-a-late")
        assert e.value.token == hold_a.token and e.value.highest == hold_b.token and e.value.mode == mode
        assert resource.read() == ("written-by-b", hold_b.token)
    net.frozen.clear()
    hold_a.__exit__(None, None, None)  # quietly

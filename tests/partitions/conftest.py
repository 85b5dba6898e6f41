"""Partition tests need root, iproute2 and nftables: without them they are skipped with the
reason, visibly, or fail where ``FAIRSHARE_REQUIRE_NETNS=1`` (set by ``.ci/run``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from tests.partitions.netns import Network, available, sweep


@pytest.fixture
def make_network() -> Iterator[Callable[..., Network]]:
    """Networks for one test (``make_network("a", "b")``: hosts a and b), each removed at the
    test's end, passed or failed; what an earlier, killed run left is removed first."""
    why = available()
    if why is not None:
        if os.environ.get("FAIRSHARE_REQUIRE_NETNS") == "1":
            pytest.fail(f"FAIRSHARE_REQUIRE_NETNS=1 but {why}")
        pytest.skip(why)
    sweep()
    made: list[Network] = []

    def make(*hosts: str) -> Network:
        network = Network(net=77 + len(made))
        made.append(network)
        for host in hosts:
            network.add(host)
        return network

    try:
        yield make
    finally:
        for network in made:
            network.close()

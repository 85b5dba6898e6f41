"""The partition harness itself: hosts reach each other and nothing else, cuts drop what they
say (one way or both), heal restores, a bounded fault heals by itself, and nothing is left
behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.partitions.netns import PREFIX, Network, namespaces, sweep

Make = Callable[..., Network]


def _listen(net: Network, host: str) -> socket.socket:
    server = net.socket_in(host)
    server.bind((net.address(host), 0))
    server.listen(8)
    return server


def _connects(net: Network, source: str, server: socket.socket, timeout: float = 5.0) -> bool:
    """Whether ``source`` connects within ``timeout`` (after a heal, the first ARP probe and
    SYN retransmission may each take a second)."""
    client = net.socket_in(source)
    client.settimeout(timeout)
    try:
        client.connect(server.getsockname())
    except OSError:
        return False
    finally:
        client.close()
    return True


def test_hosts_reach_each_other_by_address(make_network: Make) -> None:
    net = make_network("a", "b")
    server = _listen(net, "b")
    assert _connects(net, "a", server)
    server.close()


def test_a_host_reaches_nothing_outside_the_network(make_network: Make) -> None:
    net = make_network("a")
    # the test process's own loopback listener is not the host's loopback
    outside = socket.socket()
    outside.bind(("127.0.0.1", 0))
    outside.listen(1)
    client = net.socket_in("a")
    client.settimeout(1.0)
    with pytest.raises(OSError, match=r"unreachable|refused|timed out"):
        client.connect(outside.getsockname())
    client.close()
    outside.close()
    routes = subprocess.run(
        net.command("a", ["ip", "route"]), capture_output=True, text=True, check=True
    ).stdout
    assert "default" not in routes, routes


def test_a_cut_both_ways_drops_and_heal_restores(make_network: Make) -> None:
    net = make_network("a", "b", "c")
    server = _listen(net, "b")
    net.cut("a", "b")
    assert not _connects(net, "a", server, timeout=1.0)
    assert _connects(net, "c", server), "only the link cut"
    net.heal("a", "b")
    assert _connects(net, "a", server)
    server.close()


def test_a_one_way_cut_breaks_new_connections_both_ways(make_network: Make) -> None:
    net = make_network("a", "b")
    on_a, on_b = _listen(net, "a"), _listen(net, "b")
    net.cut("a", "b", both_ways=False)
    assert not _connects(net, "a", on_b, timeout=1.0), "a's SYN is dropped"
    assert not _connects(net, "b", on_a, timeout=1.0), "a's SYN-ACK is dropped"
    net.heal_all()
    assert _connects(net, "a", on_b)
    assert _connects(net, "b", on_a)
    on_a.close()
    on_b.close()


def test_a_one_way_cut_stalls_an_established_connection_without_an_error(
    make_network: Make,
) -> None:
    net = make_network("a", "b")
    server = _listen(net, "b")
    client = net.socket_in("a")
    client.settimeout(2.0)
    client.connect(server.getsockname())
    accepted, _ = server.accept()
    accepted.settimeout(1.0)
    net.cut("a", "b", both_ways=False)
    client.sendall(b"lost")  # accepted into the send buffer: no error
    with pytest.raises(TimeoutError):
        accepted.recv(4)
    net.heal_all()
    assert accepted.recv(4) == b"lost", "retransmitted once healed"
    for s in (client, accepted, server):
        s.close()


def test_isolate_cuts_a_host_from_every_other(make_network: Make) -> None:
    net = make_network("a", "b", "c")
    servers = {h: _listen(net, h) for h in ("a", "b", "c")}
    net.isolate("a")
    assert not _connects(net, "b", servers["a"], timeout=1.0)
    assert not _connects(net, "a", servers["c"], timeout=1.0)
    assert _connects(net, "b", servers["c"])
    net.heal_all()
    assert _connects(net, "b", servers["a"])
    for s in servers.values():
        s.close()


def test_a_bounded_fault_heals_by_itself(make_network: Make) -> None:
    net = make_network("a", "b")
    server = _listen(net, "b")
    began = time.monotonic()
    with net.bounded_fault(lambda: net.isolate("b"), at_most_s=1.0):
        assert not _connects(net, "a", server, timeout=0.5)
        while net.cuts and time.monotonic() - began < 10:
            time.sleep(0.05)
        assert not net.cuts, "healed by the timer, inside the block"
        assert _connects(net, "a", server)
    server.close()


def test_processes_run_inside_a_host(make_network: Make) -> None:
    net = make_network("a", "b")
    server = _listen(net, "b")
    host, port = server.getsockname()
    code = f"import socket; socket.create_connection(({host!r}, {port}), timeout=2).close()"
    done = net.run("a", [sys.executable, "-c", code])
    assert done.wait(timeout=30) == 0
    accepted, peer = server.accept()
    assert peer[0] == net.address("a")
    accepted.close()
    server.close()


def test_close_removes_every_namespace(make_network: Make) -> None:
    net = make_network("a", "b")
    mine = [net.switch, *(h.namespace for h in net.hosts.values())]
    assert set(mine) <= set(namespaces())
    net.close()
    assert not set(mine) & set(namespaces())


def test_the_sweep_removes_what_a_killed_run_left() -> None:
    from tests.partitions.netns import available

    if available() is not None:
        pytest.skip(str(available()))
    # a pid that is not running: a child that has exited
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    left = f"{PREFIX}-{child.pid}-dead00-sw"
    subprocess.run(["ip", "netns", "add", left], check=True)
    assert left in namespaces()
    assert left in sweep()
    assert left not in namespaces()
    assert f"{PREFIX}-{os.getpid()}" not in " ".join(sweep()), "a live run is kept"

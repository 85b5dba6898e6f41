"""A network of hosts for partition tests: Linux network namespaces on a private bridge, with
links cut and healed by the test.

Crashes (kill -9) leave every other process able to reach every other; a partition does not:
a process stays alive and keeps acting on what it last knew while some peers cannot reach it.
Each *host* here is a network namespace (``fsnet-<pid>-<token>-<host>``) with one interface on
a bridge that lives in a namespace of its own (the *switch*), on ``10.77.<n>.0/24`` with no
route anywhere else: a process started in a host (:meth:`Network.run`) reaches the other hosts
by their addresses and nothing outside, and the test process reaches them through sockets
opened inside a host (:meth:`Network.socket_in`).

Faults are cut at the switch with nftables (a ``bridge`` table in the switch's namespace; this
kernel's ``tc`` has no drop action): :meth:`Network.cut` drops frames from one host to another,
one way or both ways, :meth:`Network.isolate` cuts a host from every other, :meth:`Network.heal`
and :meth:`Network.heal_all` undo them. A one-way cut ``a -> b`` breaks *new* TCP connections
both ways (the handshake needs both directions) and stalls established ones without an error:
what a half-broken link does to a client.

Every fault loop is bounded: :meth:`Network.bounded_fault` heals by itself after at most
``at_most_s`` seconds, from a timer, whatever the test is doing. And every namespace is removed:
:meth:`Network.close` at the end of the test (the fixture calls it, failed test or not), and
:func:`sweep` removes what a killed test run left (its pid is gone) before the next one starts.

Needs root, ``ip`` (iproute2) and ``nft`` (nftables); ``tests/partitions/conftest.py`` skips
without them, visibly, or fails where ``FAIRSHARE_REQUIRE_NETNS=1`` (CI).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

PREFIX = "fsnet"
#: ``setns(2)``'s flag for a network namespace (Python 3.11's ``os`` has no ``setns``).
CLONE_NEWNET = 0x40000000


def available() -> str | None:
    """Why partition tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "partition tests need root (network namespaces)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"partition tests need `{tool}` (apt-get install iproute2 nftables)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def namespaces() -> list[str]:
    listed = _ip("netns", "list", check=False).stdout.splitlines()
    return [line.split()[0] for line in listed if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep() -> list[str]:
    """Remove the namespaces of test runs that are gone (their pid no longer runs); returns
    the names removed."""
    removed = []
    for name in namespaces():
        parts = name.split("-")
        ours = len(parts) >= 4 and parts[0] == PREFIX and parts[1].isdigit()
        if ours and not _alive(int(parts[1])):
            _ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str
    #: The switch's end of the host's link (the name the cuts match on).
    port: str


@dataclass
class Network:
    """Hosts on one bridge; see the module docstring. Use as a context manager, or call
    :meth:`close`."""

    net: int = 77
    token: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: dict[str, Host] = field(default_factory=dict)
    #: The links cut now: (from host, to host).
    cuts: set[tuple[str, str]] = field(default_factory=set)
    _timers: list[threading.Timer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def __post_init__(self) -> None:
        self.switch = f"{PREFIX}-{os.getpid()}-{self.token}-sw"
        _ip("netns", "add", self.switch)
        self._in_switch("ip", "link", "add", "br0", "type", "bridge")
        self._in_switch("ip", "link", "set", "br0", "up")
        self._in_switch("ip", "link", "set", "lo", "up")
        self._apply_cuts()

    def _in_switch(self, *argv: str) -> None:
        subprocess.run(
            ["ip", "netns", "exec", self.switch, *argv], check=True, capture_output=True, timeout=30
        )

    # -- hosts -------------------------------------------------------------------------------
    def add(self, name: str) -> Host:
        """A new host ``name`` on the bridge, with the next address."""
        if name in self.hosts:
            raise ValueError(f"host {name} exists")
        index = len(self.hosts) + 1
        namespace = f"{PREFIX}-{os.getpid()}-{self.token}-{name}"
        port = f"p{self.token}{index}"
        address = f"10.77.{self.net}.{index + 1}"
        _ip("netns", "add", namespace)
        _ip("link", "add", port, "type", "veth", "peer", "name", f"h{self.token}{index}")
        _ip("link", "set", port, "netns", self.switch)
        _ip("link", "set", f"h{self.token}{index}", "netns", namespace)
        self._in_switch("ip", "link", "set", port, "master", "br0")
        self._in_switch("ip", "link", "set", port, "up")
        inside = ("ip", "netns", "exec", namespace)
        for command in (
            ("ip", "link", "set", "lo", "up"),
            ("ip", "link", "set", f"h{self.token}{index}", "name", "eth0"),
            ("ip", "addr", "add", f"{address}/24", "dev", "eth0"),
            ("ip", "link", "set", "eth0", "up"),
        ):
            subprocess.run([*inside, *command], check=True, capture_output=True, timeout=30)
        host = self.hosts[name] = Host(name, namespace, address, port)
        return host

    def address(self, name: str) -> str:
        return self.hosts[name].address

    # -- faults ------------------------------------------------------------------------------
    def cut(self, a: str, b: str, both_ways: bool = True) -> None:
        """Drop what ``a`` sends ``b`` (and, ``both_ways``, what ``b`` sends ``a``)."""
        with self._lock:
            self.cuts.add((a, b))
            if both_ways:
                self.cuts.add((b, a))
            self._apply_cuts()

    def isolate(self, a: str, both_ways: bool = True) -> None:
        """Cut ``a`` from every other host."""
        with self._lock:
            for other in self.hosts:
                if other != a:
                    self.cuts.add((a, other))
                    if both_ways:
                        self.cuts.add((other, a))
            self._apply_cuts()

    def heal(self, a: str, b: str) -> None:
        """Both ways between ``a`` and ``b`` pass again."""
        with self._lock:
            self.cuts -= {(a, b), (b, a)}
            self._apply_cuts()

    def heal_all(self) -> None:
        with self._lock:
            self.cuts.clear()
            self._apply_cuts()

    @contextlib.contextmanager
    def bounded_fault(self, fault: Callable[[], None], at_most_s: float) -> Iterator[None]:
        """Inject ``fault`` (e.g. ``lambda: net.isolate("api")``) for the body, healed when
        the body ends or after ``at_most_s`` seconds, whichever comes first: a hung test
        never leaves a network cut."""
        fault()
        timer = threading.Timer(at_most_s, self.heal_all)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            self.heal_all()

    def _apply_cuts(self) -> None:
        """The switch's whole rule set, replaced at once (``nft -f`` is atomic)."""
        rules = [
            f'iifname "{self.hosts[a].port}" oifname "{self.hosts[b].port}" drop'
            for a, b in sorted(self.cuts)
            if a in self.hosts and b in self.hosts
        ]
        script = "\n".join(
            [
                "table bridge fsnet",
                "delete table bridge fsnet",
                "table bridge fsnet {",
                "  chain forward {",
                "    type filter hook forward priority 0; policy accept;",
                *(f"    {rule}" for rule in rules),
                "  }",
                "}",
            ]
        )
        subprocess.run(
            ["ip", "netns", "exec", self.switch, "nft", "-f", "-"],
            input=script,
            text=True,
            check=True,
            capture_output=True,
            timeout=30,
        )

    # -- processes and sockets inside hosts --------------------------------------------------
    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` as run inside ``host``."""
        return ["ip", "netns", "exec", self.hosts[host].namespace, *argv]

    def run(self, host: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``host`` (its network only; files and environment are the
        test's)."""
        return subprocess.Popen(self.command(host, argv), **popen)

    def call_in(self, host: str, function: Callable[[], T]) -> T:
        """Call ``function`` on a thread that has entered ``host``'s network namespace: a
        socket it creates belongs to that host for good, whichever thread uses it later."""
        path = f"/var/run/netns/{self.hosts[host].namespace}"
        outcome: dict[str, Any] = {}

        def enter_and_call() -> None:
            try:
                with open(path, "rb") as handle:
                    libc = ctypes.CDLL(None, use_errno=True)
                    if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {path}")
                outcome["value"] = function()
            except BaseException as error:  # handed back to the caller's thread
                outcome["error"] = error

        thread = threading.Thread(target=enter_and_call, name=f"netns-{host}")
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]  # type: ignore[no-any-return]

    def socket_in(self, host: str, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket of ``host``'s network (the test process talking as that host)."""
        return self.call_in(host, lambda: socket.socket(socket.AF_INET, kind))

    # -- the end -----------------------------------------------------------------------------
    def close(self) -> None:
        """Heal, stop the timers and remove every namespace (deleting the switch removes the
        links)."""
        if self._closed:
            return
        self._closed = True
        for timer in self._timers:
            timer.cancel()
        for host in self.hosts.values():
            _ip("netns", "del", host.namespace, check=False)
        _ip("netns", "del", self.switch, check=False)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

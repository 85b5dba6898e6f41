"""The client's own HTTP transport (``http.client``) against a real local HTTP/1.1 server:
connections kept and reused, one that the server closed meanwhile replaced without sending
the request twice, threads sharing one transport, proxies from the environment, and every
failure an :class:`UnreachableError` naming what went wrong."""

from __future__ import annotations

import base64
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from services.client.api import ApiError, FairshareClient
from services.client.transport import DirectTransport, Reply, UnreachableError

PLAIN = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


@dataclass
class Seen:
    """What the server saw: each request's line and body, and each connection it accepted."""

    requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    #: each request's Proxy-Authorization header (None without one)
    proxy_authorizations: list[str | None] = field(default_factory=list)
    connections: int = 0
    #: close each connection after this many answers, without saying so (a server's idle
    #: timeout as a kept connection's next request meets it)
    close_after: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def serve(seen: Seen) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        answered = 0

        def setup(self) -> None:
            super().setup()
            with seen.lock:
                seen.connections += 1

        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            with seen.lock:
                seen.requests.append((self.command, self.path, body))
                seen.proxy_authorizations.append(self.headers.get("proxy-authorization"))
            data = b'{"ok": true}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.answered += 1
            if seen.close_after and self.answered >= seen.close_after:
                self.close_connection = True

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def do_CONNECT(self) -> None:
            # a proxy that refuses the tunnel: what the client sent it is all the test needs
            with seen.lock:
                seen.requests.append((self.command, self.path, b""))
                seen.proxy_authorizations.append(self.headers.get("proxy-authorization"))
            self.send_response(407)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def url(seen: Seen) -> Iterator[str]:
    server, address = serve(seen)
    yield address
    server.shutdown()
    server.server_close()


def send(
    transport: DirectTransport, url: str, method: str = "GET", body: bytes | None = None
) -> Reply:
    return transport.send(method, url, params={}, body=body, headers={})


def test_requests_share_one_kept_connection(seen: Seen, url: str) -> None:
    transport = DirectTransport(5, PLAIN)
    for _ in range(5):
        assert send(transport, f"{url}/nodes").status == 200
    assert seen.connections == 1
    transport.close()


def test_a_connection_the_server_closed_is_replaced_and_nothing_is_sent_twice(
    seen: Seen, url: str
) -> None:
    seen.close_after = 1
    transport = DirectTransport(5, PLAIN)
    for number in range(4):
        reply = send(transport, f"{url}/workloads", "POST", f'{{"n": {number}}}'.encode())
        assert reply.status == 200
    assert [body for _, _, body in seen.requests] == [f'{{"n": {n}}}'.encode() for n in range(4)]
    assert seen.connections == 4
    transport.close()


def test_threads_share_a_transport(seen: Seen, url: str) -> None:
    transport = DirectTransport(5, PLAIN)
    errors: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            for number in range(20):
                reply = transport.send(
                    "GET", f"{url}/w", params={"t": str(thread), "n": str(number)}, body=None,
                    headers={},
                )  # fmt: skip
                assert reply.status == 200
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(path for _, path, _ in seen.requests) == sorted(
        f"/w?t={t}&n={n}" for t in range(8) for n in range(20)
    )
    assert seen.connections <= 8
    transport.close()


def test_a_proxy_from_the_environment_is_used_unless_the_host_is_exempt(
    seen: Seen, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recording server plays the proxy: a request through a proxy names the whole URL
    (and, the proxy's URL naming no user, sends no proxy authorization)."""
    _use_proxy(monkeypatch, url, "http")
    transport = DirectTransport(5, PLAIN)
    assert send(transport, "http://api.example:8000/nodes").status == 200
    assert seen.requests[-1][1] == "http://api.example:8000/nodes"
    assert seen.proxy_authorizations == [None]
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    assert send(transport, f"{url}/direct").status == 200
    assert seen.requests[-1][1] == "/direct"
    transport.close()


def test_a_proxy_url_with_credentials_authenticates_plain_and_tunnelled_requests(
    seen: Seen, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``user:password@`` in the proxy's URL (percent-encoded as curl takes it) becomes Basic
    proxy authorization: on each plain-HTTP request, and on an https tunnel's CONNECT."""
    _use_proxy(monkeypatch, url.replace("http://", "http://ops%40lab:s%3Acret@"), "http", "https")
    transport = DirectTransport(5, PLAIN)
    assert send(transport, "http://api.example:8000/nodes").status == 200
    expected = "Basic " + base64.b64encode(b"ops@lab:s:cret").decode()
    assert seen.proxy_authorizations[-1] == expected
    with pytest.raises(UnreachableError, match="407"):
        send(transport, "https://api.example:8443/nodes")
    assert seen.requests[-1][:2] == ("CONNECT", "api.example:8443")
    assert seen.proxy_authorizations[-1] == expected
    transport.close()


def _use_proxy(monkeypatch: pytest.MonkeyPatch, proxy: str, *schemes: str) -> None:
    for scheme in schemes:
        monkeypatch.setenv(f"{scheme}_proxy", proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)


def test_a_server_that_never_answers_times_out() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        transport = DirectTransport(0.3, PLAIN)
        with pytest.raises(UnreachableError, match="timed out"):
            send(transport, f"http://127.0.0.1:{silent.getsockname()[1]}/nodes")
    finally:
        silent.close()


def test_the_client_names_an_unreachable_api_and_a_refused_request(url: str) -> None:
    refused = pytest.raises(ApiError, match=r"cannot reach the API at http://127\.0\.0\.1:9")
    with FairshareClient("http://127.0.0.1:9", "t", timeout_s=2) as client, refused as info:
        client.nodes()
    assert info.value.status == 0
    with FairshareClient(url, "t") as client:
        assert client.request("GET", "/anything", params={"flag": True, "n": 3}) == {"ok": True}

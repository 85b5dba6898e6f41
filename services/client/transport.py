"""How the client's requests reach the API: a port with two adapters.

:class:`DirectTransport`, the default, speaks HTTP/1.1 through the standard library's
``http.client``: every ``fairshare`` command pays for importing its HTTP client before it sends
anything, and httpx (with httpcore, h11, anyio and its own command line's Rich and Pygments)
took 0.1 s of a command that should take 0.3 s in all, ``http.client`` 0.01 s. It keeps its
connections open between requests (a benchmark's clients send thousands), one per thread at a
time, and goes through the proxy that ``$https_proxy``/``$http_proxy`` name unless
``$no_proxy`` exempts the host, as httpx and curl do (with the ``user:password@`` its URL
carries, sent as Basic proxy authorization).

:class:`HttpxTransport` wraps an ``httpx.Client`` a caller hands in: FastAPI's ``TestClient``
(tests drive the API in-process through it) or a client with settings of its own."""

from __future__ import annotations

import http.client
import os
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlencode, urlsplit

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes


class UnreachableError(Exception):
    """No answer came: the address is wrong, nothing listens there, TLS failed, or it timed
    out. The message says which, for the user."""


class Transport(Protocol):
    def send(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str],
        body: bytes | None,
        headers: Mapping[str, str],
    ) -> Reply: ...

    def close(self) -> None: ...


def _target(url: str, params: Mapping[str, str]) -> str:
    query = urlencode(params, doseq=True)
    return f"{url}{'&' if '?' in url else '?'}{query}" if query else url


class HttpxTransport:
    """An ``httpx.Client`` the caller made (and closes)."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def send(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str],
        body: bytes | None,
        headers: Mapping[str, str],
    ) -> Reply:
        import httpx  # the caller's client imported it already

        try:
            response = self.client.request(
                method, url, params=dict(params), content=body, headers=dict(headers)
            )
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            raise UnreachableError(str(error) or type(error).__name__) from error
        return Reply(response.status_code, response.content)

    def close(self) -> None:
        """The caller's client stays open: it is the caller's."""


@dataclass(frozen=True)
class _Proxy:
    host: str
    port: int
    #: ``Basic ...`` from the ``user:password@`` of the proxy's URL, when it has one.
    authorization: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Proxy-Authorization": self.authorization} if self.authorization else {}


@dataclass(frozen=True)
class _Route:
    """Where a connection for one URL goes: the origin, or a proxy (tunnelled for https)."""

    https: bool
    host: str
    port: int
    proxy: _Proxy | None

    def connect(self, timeout_s: float, context: ssl.SSLContext) -> http.client.HTTPConnection:
        host, port = (self.proxy.host, self.proxy.port) if self.proxy else (self.host, self.port)
        connection: http.client.HTTPConnection
        if self.https:
            connection = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
            if self.proxy:
                connection.set_tunnel(self.host, self.port, headers=self.proxy.headers())
        else:
            connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
        return connection

    def request_headers(self) -> dict[str, str]:
        """Headers a request itself carries for the route: a plain-HTTP request through a
        proxy authenticates to it (an https one did so once, on its tunnel's CONNECT)."""
        return self.proxy.headers() if self.proxy and not self.https else {}


def _proxy_for(scheme: str, host: str) -> _Proxy | None:
    """The proxy ``$<scheme>_proxy`` names for ``host`` (None without one or when ``$no_proxy``
    exempts the host), with the credentials its URL carries. ``urllib.request`` reads these
    variables as curl does; it is imported only when one is set."""
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        return None
    from urllib.request import getproxies_environment, proxy_bypass

    proxy = getproxies_environment().get(scheme)
    if not proxy or proxy_bypass(host):
        return None
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if not parts.hostname:
        return None
    authorization = None
    if parts.username is not None:
        from base64 import b64encode
        from urllib.parse import unquote

        user_password = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + b64encode(user_password.encode()).decode("ascii")
    return _Proxy(parts.hostname, parts.port or 80, authorization)


class DirectTransport:
    """HTTP/1.1 through ``http.client``, connections kept open and shared between threads
    (each request holds one alone while it runs)."""

    def __init__(self, timeout_s: float, context: ssl.SSLContext) -> None:
        self.timeout_s = timeout_s
        self.context = context
        self._idle: dict[_Route, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def send(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str],
        body: bytes | None,
        headers: Mapping[str, str],
    ) -> Reply:
        route, path = self._route(url)
        path = _target(path, params)
        sent = {"Host": _host_header(route), **route.request_headers(), **headers}
        # A kept connection the server has closed since fails on its first use; a fresh one
        # gets the one retry. A request is sent at most twice, and only on a reused
        # connection that broke before any answer: the API's writes are idempotent anyway.
        kept = self._take(route)
        while True:
            connection = kept or route.connect(self.timeout_s, self.context)
            try:
                connection.request(method, path, body=body, headers=sent)
                response = connection.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                if kept is not None and isinstance(error, _STALE):
                    kept = None
                    continue
                raise UnreachableError(_describe(error)) from error
            if response.will_close:
                connection.close()
            else:
                self._give_back(route, connection)
            return Reply(response.status, data)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    def _route(self, url: str) -> tuple[_Route, str]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UnreachableError(f"not an http(s) URL: {url!r}")
        https = parts.scheme == "https"
        try:
            port = parts.port or (443 if https else 80)
        except ValueError as error:
            raise UnreachableError(f"bad port in {url!r}: {error}") from error
        proxy = _proxy_for(parts.scheme, parts.hostname)
        route = _Route(https, parts.hostname, port, proxy)
        path = parts.path or "/"
        if parts.query:
            path = f"{path}?{parts.query}"
        # a plain-HTTP request through a proxy names the whole URL
        return route, (f"http://{_host_header(route)}{path}" if proxy and not https else path)

    def _take(self, route: _Route) -> http.client.HTTPConnection | None:
        with self._lock:
            idle = self._idle.get(route)
            return idle.pop() if idle else None

    def _give_back(self, route: _Route, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.setdefault(route, []).append(connection)


#: What a kept connection that the server closed meanwhile raises on its next request.
_STALE = (
    http.client.RemoteDisconnected,
    BrokenPipeError,
    ConnectionResetError,
    http.client.CannotSendRequest,
)


def _host_header(route: _Route) -> str:
    default = 443 if route.https else 80
    host = f"[{route.host}]" if ":" in route.host else route.host
    return host if route.port == default else f"{host}:{route.port}"


def _describe(error: BaseException) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"the API's certificate is not trusted ({error})"
    if isinstance(error, TimeoutError):
        return "timed out"
    return str(error) or type(error).__name__

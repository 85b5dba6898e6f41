"""Running the API against Kafka: the Kafka-backed view and publisher under uvicorn.

What may reach the network is decided here, before Kafka is touched (:func:`preflight`): the
demo tokens only on a loopback address; HTTPS when ``--tls-cert`` and ``--tls-key`` are given
(uvicorn's own TLS), and plain HTTP on any other address only with ``--insecure-http``. Every
request carries a bearer token, so plain HTTP across a network hands each caller's token to
whoever is on the path: refused by default, like the demo tokens, rather than warned about in a
log nobody reads. The escape hatch exists for a TLS-terminating proxy in front of the API
(the compose deployment), where the plain hop is the proxy's own.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import ssl
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from events.topics import Topics
from services.api.app import create_app
from services.api.security import install_security_headers, redact_access_log
from services.api.tokens import DEMO_TOKENS, TokenSource, default_tokens
from services.api.tokens_file import TokensFile
from services.api.view import LiveView

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp

log = logging.getLogger(__name__)


class DemoTokensError(ValueError):
    """The demo tokens were about to be served where others can reach them."""


class TransportError(ValueError):
    """The API was asked to serve in a way that would expose tokens or its TLS key; the
    message says what and the way out."""


@dataclass(frozen=True)
class Tls:
    """The server's certificate (PEM, chain included) and its private key, checked."""

    cert: Path
    key: Path


def tls_files(cert: str | Path | None, key: str | Path | None) -> Tls | None:
    """The TLS files, checked as the server would use them, or None for plain HTTP. Raises
    TransportError when only one is given, one cannot be read, the key is open to other users
    (whoever reads it can impersonate the API and read every token sent to it) or the two are
    not a certificate and its key."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise TransportError(f"{given} was given without {missing}: HTTPS needs both")
    for path, option in ((cert, "--tls-cert"), (key, "--tls-key")):
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            raise TransportError(f"{option}: cannot read {path}: {error.strerror}") from error
    mode = stat.S_IMODE(os.stat(key).st_mode)
    if mode & 0o077:
        raise TransportError(
            f"--tls-key: {key} is open to other users (mode {mode:04o}): whoever reads it can "
            f"pose as this API and read the tokens sent to it; `chmod 600 {key}`"
        )
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except ssl.SSLError as error:
        raise TransportError(
            f"--tls-cert/--tls-key: {cert} and {key} are not a PEM certificate and its private "
            f"key: {error}"
        ) from error
    return Tls(Path(cert), Path(key))


def check_transport(host: str, tls: Tls | None, *, insecure_http: bool = False) -> None:
    """Refuse plain HTTP where others can connect, unless ``insecure_http`` says a proxy in
    front does TLS (then a warning is logged): raises TransportError."""
    if tls is not None or is_loopback(host):
        return
    if not insecure_http:
        raise TransportError(
            f"refusing to serve plain HTTP on {host}, which is not a loopback address: every "
            "request carries a token, readable by anyone on the path. Pass --tls-cert FILE "
            "--tls-key FILE, or --insecure-http when a TLS-terminating proxy in front of the "
            "API is the only one that reaches it"
        )
    log.warning(
        "serving plain HTTP on %s (--insecure-http): tokens cross the network in clear unless "
        "a TLS proxy in front of the API is the only one that reaches it",
        host,
    )


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (``localhost``, 127.0.0.0/8, ``::1``). Any
    other name counts as reachable: what it resolves to can change."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tokens_for(tokens_path: str | Path | None, host: str) -> TokenSource:
    """The tokens file (re-read as it changes); without a file the demo tokens, on a loopback
    ``host`` only (anyone can guess ``admin-token``): raises DemoTokensError (or
    TokenFileError)."""
    if tokens_path is not None:
        return TokensFile(tokens_path)
    if not is_loopback(host):
        raise DemoTokensError(
            f"refusing to serve the demo tokens ({', '.join(DEMO_TOKENS)}: anyone can guess "
            f"them) on {host}, which is not a loopback address. Create a tokens file with "
            "`fairshare tokens add USER [--admin] --file FILE` and pass --tokens FILE, or "
            "listen on 127.0.0.1"
        )
    return default_tokens()


def preflight(
    tokens_path: str | Path | None,
    host: str,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    *,
    insecure_http: bool = False,
) -> tuple[TokenSource, Tls | None]:
    """Everything that can refuse a start, checked before Kafka is touched: the tokens (see
    :func:`tokens_for`), the TLS files (:func:`tls_files`), then the transport
    (:func:`check_transport`). Raises DemoTokensError, TokenFileError or TransportError."""
    tokens = tokens_for(tokens_path, host)
    tls = tls_files(tls_cert, tls_key)
    check_transport(host, tls, insecure_http=insecure_http)
    return tokens, tls


def listener(app: ASGIApp, host: str, port: int, tls: Tls | None = None) -> uvicorn.Config:
    """How uvicorn serves ``app``: HTTPS with ``tls``, and a request in flight (a slow
    client, a long report) never holds a shutdown (after half the stop grace period the
    server closes what is still open). The HTTPS test serves through this very function."""
    import uvicorn

    from services.runtime.signals import stop_grace_s

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        timeout_graceful_shutdown=max(1, int(stop_grace_s() / 2)),
        ssl_certfile=None if tls is None else tls.cert,
        ssl_keyfile=None if tls is None else tls.key,
    )


def serve(
    bootstrap: str,
    topic_prefix: str = "fairshare.",
    tokens_path: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    database_url: str | None = None,
    checkpoint_every_s: float | None = 300.0,
    *,
    tls: Tls | None = None,
    insecure_http: bool = False,
) -> None:
    """Serve the API until interrupted: ensure the topics exist, start the view's consumer
    (reading the whole log) and listen at once; until the view has read the history, every
    request but ``/health`` answers 503 with Retry-After. ``database_url``
    names the read models the reports and the dashboard's usage series read;
    ``checkpoint_every_s``: how often the view checkpoints its fold (it starts from the latest
    one and reads only the log's tail; None: from the log's first offset, never saved); ``tls``:
    serve HTTPS with these files (:func:`tls_files`). Raises DemoTokensError, TokenFileError or
    TransportError before touching Kafka (see :func:`preflight`)."""
    from services.api.application import write_producer_config
    from services.bus.admin import ensure_topics
    from services.bus.kafka import KafkaEventPublisher
    from services.bus.signing import signed
    from services.metrics.endpoint import count_restarts

    topics = Topics(prefix=topic_prefix)
    cert, key = (None, None) if tls is None else (tls.cert, tls.key)
    tokens, tls = preflight(tokens_path, host, cert, key, insecure_http=insecure_http)
    count_restarts()  # served at /metrics on the API's own port
    if tokens_path is None:
        log.warning("serving with the demo tokens (%s) on %s", ", ".join(DEMO_TOKENS), host)
    redact_access_log()
    ensure_topics(bootstrap, topics)
    view = LiveView.from_kafka(bootstrap, topics, checkpoint_every_s=checkpoint_every_s)
    # what the API accepts is signed with its key ($FAIRSHARE_SIGNING_KEY, services.bus.signing)
    publisher = signed(
        KafkaEventPublisher(
            bootstrap, topics, client_id="fairshare-api", config=write_producer_config()
        )
    )
    view.start()  # reads the history meanwhile: requests answer 503 until it has
    try:
        log.info(
            "api serving",
            extra={
                "host": host,
                "port": port,
                "scheme": "https" if tls else "http",
                "bootstrap": bootstrap,
                "prefix": topic_prefix,
            },
        )
        engine = None
        if database_url:
            from services.read_models.migrate import engine_for

            engine = engine_for(database_url)
        app = create_app(view, publisher, tokens, engine=engine)
        install_security_headers(app)  # idempotent: a no-op where create_app installed them
        import uvicorn

        uvicorn.Server(listener(app, host, port, tls)).run()
    finally:
        view.stop()
        publisher.close()

"""Running the API against Kafka: the Kafka-backed view and publisher under uvicorn."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path

from events.topics import Topics
from services.api.app import create_app
from services.api.security import install_security_headers, redact_access_log
from services.api.tokens import DEMO_TOKENS, TokenTable, default_tokens
from services.api.tokens_file import load_tokens
from services.api.view import LiveView

log = logging.getLogger(__name__)


class DemoTokensError(ValueError):
    """The demo tokens were about to be served where others can reach them."""


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (``localhost``, 127.0.0.0/8, ``::1``). Any
    other name counts as reachable: what it resolves to can change."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tokens_for(tokens_path: str | Path | None, host: str) -> TokenTable:
    """The tokens file's table; without a file the demo tokens, on a loopback ``host`` only
    (anyone can guess ``admin-token``): raises DemoTokensError (or TokenFileError)."""
    if tokens_path is not None:
        return load_tokens(tokens_path)
    if not is_loopback(host):
        raise DemoTokensError(
            f"refusing to serve the demo tokens ({', '.join(DEMO_TOKENS)}: anyone can guess "
            f"them) on {host}, which is not a loopback address. Create a tokens file with "
            "`fairshare tokens add USER [--admin] --file FILE` and pass --tokens FILE, or "
            "listen on 127.0.0.1"
        )
    return default_tokens()


def serve(
    bootstrap: str,
    topic_prefix: str = "fairshare.",
    tokens_path: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    database_url: str | None = None,
    checkpoint_every_s: float | None = 300.0,
) -> None:
    """Serve the API until interrupted: ensure the topics exist, start the view's consumer
    (reading the whole log) and listen at once; until the view has read the history, every
    request but ``/health`` answers 503 with Retry-After. ``database_url``
    names the read models the reports and the dashboard's usage series read;
    ``checkpoint_every_s``: how often the view checkpoints its fold (it starts from the latest
    one and reads only the log's tail; None: from the log's first offset, never saved). Raises
    DemoTokensError or TokenFileError before touching Kafka (see :func:`tokens_for`)."""
    import uvicorn

    from services.bus.admin import ensure_topics
    from services.bus.kafka import KafkaEventPublisher
    from services.bus.signing import signed
    from services.metrics.endpoint import count_restarts

    topics = Topics(prefix=topic_prefix)
    tokens = tokens_for(tokens_path, host)
    count_restarts()  # served at /metrics on the API's own port
    if tokens_path is None:
        log.warning("serving with the demo tokens (%s) on %s", ", ".join(DEMO_TOKENS), host)
    redact_access_log()
    ensure_topics(bootstrap, topics)
    view = LiveView.from_kafka(bootstrap, topics, checkpoint_every_s=checkpoint_every_s)
    # what the API accepts is signed with its key ($FAIRSHARE_SIGNING_KEY, services.bus.signing)
    publisher = signed(KafkaEventPublisher(bootstrap, topics, client_id="fairshare-api"))
    view.start()  # reads the history meanwhile: requests answer 503 until it has
    try:
        log.info(
            "api serving",
            extra={"host": host, "port": port, "bootstrap": bootstrap, "prefix": topic_prefix},
        )
        engine = None
        if database_url:
            from services.read_models.migrate import engine_for

            engine = engine_for(database_url)
        app = create_app(view, publisher, tokens, engine=engine)
        install_security_headers(app)  # idempotent: a no-op where create_app installed them
        # A request in flight (a slow client, a long report) never holds a shutdown: after
        # half the stop grace period the server closes what is still open.
        from services.runtime.signals import stop_grace_s

        uvicorn.run(
            app,
            host=host,
            port=port,
            log_config=None,
            timeout_graceful_shutdown=max(1, int(stop_grace_s() / 2)),
        )
    finally:
        view.stop()
        publisher.close()

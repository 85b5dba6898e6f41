"""Running the API against Kafka: the Kafka-backed view and publisher under uvicorn."""

from __future__ import annotations

import logging
from pathlib import Path

from events.topics import Topics
from services.api.app import create_app
from services.api.auth import Principal, default_tokens, load_tokens
from services.api.view import LiveView

log = logging.getLogger(__name__)


def serve(
    bootstrap: str,
    topic_prefix: str = "fairshare.",
    tokens_path: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    database_url: str | None = None,
) -> None:
    """Serve the API until interrupted: ensure the topics exist, start the view's consumer
    (reading the whole log), wait for it to catch up, then answer requests. ``database_url``
    names the read models the reports and the dashboard's usage series read."""
    import uvicorn

    from services.bus.admin import ensure_topics
    from services.bus.kafka import KafkaEventPublisher

    topics = Topics(prefix=topic_prefix)
    tokens: dict[str, Principal]
    if tokens_path is None:
        tokens = default_tokens()
        log.warning("serving with the demo tokens (admin-token, ana-token, bo-token, chen-token)")
    else:
        tokens = load_tokens(tokens_path)
    ensure_topics(bootstrap, topics)
    view = LiveView.from_kafka(bootstrap, topics)
    publisher = KafkaEventPublisher(bootstrap, topics, client_id="fairshare-api")
    view.start()
    try:
        if not view.wait_caught_up(60.0):
            log.warning("view still catching up; writes answer 503 until it has")
        log.info(
            "api serving",
            extra={"host": host, "port": port, "bootstrap": bootstrap, "prefix": topic_prefix},
        )
        engine = None
        if database_url:
            from services.read_models.migrate import engine_for

            engine = engine_for(database_url)
        app = create_app(view, publisher, tokens, engine=engine)
        uvicorn.run(app, host=host, port=port, log_config=None)
    finally:
        view.stop()
        publisher.close()

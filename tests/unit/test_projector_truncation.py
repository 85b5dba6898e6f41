"""The projector stops loudly when the log no longer holds its stored positions.

A topic deleted and recreated (or truncated) leaves the read models' stored position beyond the
partition's end; skipping "redelivered" offsets would then drop every new fact silently. Here
the log is the in-memory bus, truncated by replacing a topic's partitions.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from events import TopicKind, Topics
from events.models import BudgetCreated
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.projector import cli as projector_cli
from services.projector.host import PROJECTED, LogTruncatedError, project
from services.projector.sql_projector import SqlProjector
from services.read_models.migrate import engine_for, migrate
from tests.unit.test_live_state import T0, ev

TOPICS = Topics(prefix="trunc.")
BUDGETS = TOPICS.name(TopicKind.BUDGETS)


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    engine = engine_for(f"sqlite:///{tmp_path / 'rm.db'}")
    migrate(engine)
    return engine


def _publish_budgets(broker: InMemoryBroker, names: list[str]) -> None:
    publisher = InMemoryPublisher(broker, TOPICS)
    for i, name in enumerate(names):
        publisher.publish(ev(BudgetCreated(budget=name, created_by="admin"), T0 + i))


def _run(broker: InMemoryBroker, engine: Engine, group: str = "projector") -> int:
    subscriber = InMemorySubscriber(broker, group, PROJECTED, TOPICS)
    polls = iter(range(3))
    return project(
        subscriber,
        SqlProjector(engine),
        lambda: subscriber.end_offsets(),
        lambda: next(polls, None) is None,
        topics=[TOPICS.name(kind) for kind in PROJECTED],
        commit=subscriber.commit,
    )


def _recreate(broker: InMemoryBroker, topic: str) -> None:
    """Delete and recreate a topic: every partition starts again at offset 0."""
    broker.partitions(topic).clear()
    broker.partitions(topic).extend([] for _ in range(broker.default_partitions))


def test_a_stored_position_beyond_the_end_stops_the_projector(engine: Engine) -> None:
    broker = InMemoryBroker(partitions=1)
    _publish_budgets(broker, ["lab", "lab/a", "lab/b"])
    assert _run(broker, engine) == 3
    _recreate(broker, BUDGETS)
    _publish_budgets(broker, ["other"])
    with pytest.raises(LogTruncatedError) as caught:
        _run(broker, engine)
    error = caught.value
    assert (error.topic, error.partition, error.stored, error.end) == (BUDGETS, 0, 3, 1)
    assert f"{BUDGETS} partition 0" in str(error)
    assert "offset 3" in str(error)
    assert "ends at 1" in str(error)


def test_offsets_going_backwards_while_running_stop_the_projector(engine: Engine) -> None:
    broker = InMemoryBroker(partitions=1)
    _publish_budgets(broker, ["lab", "lab/a"])
    subscriber = InMemorySubscriber(broker, "projector", PROJECTED, TOPICS)
    rounds = 0

    def stop() -> bool:
        nonlocal rounds
        rounds += 1
        if rounds == 2:  # after the first batch: the topic is recreated and grows again
            _recreate(broker, BUDGETS)
            _publish_budgets(broker, ["x", "y", "z"])
            subscriber._fetched.clear()  # the consumer's offset reset to the earliest
        return rounds > 3

    with pytest.raises(LogTruncatedError, match="went back from 2 to 0"):
        project(subscriber, SqlProjector(engine), subscriber.end_offsets, stop)


def test_a_redelivery_within_the_log_is_skipped_as_before(engine: Engine) -> None:
    """A crash between the SQL commit and the offset commit redelivers: that is not a cut."""
    broker = InMemoryBroker(partitions=1)
    _publish_budgets(broker, ["lab", "lab/a"])
    projector = SqlProjector(engine)
    subscriber = InMemorySubscriber(broker, "projector", PROJECTED, TOPICS)
    assert project(subscriber, projector, subscriber.end_offsets, lambda: False, max_batches=1) == 2
    _publish_budgets(broker, ["lab/b"])
    assert _run(broker, engine) == 1  # offsets never committed: 0 and 1 again, then 2
    assert projector.positions() == {(BUDGETS, 0): 3}


def test_the_cli_exits_non_zero_with_one_line_naming_the_partition(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def truncated(*_args: object, **_kwargs: object) -> int:
        raise LogTruncatedError(BUDGETS, 0, 3, 1, "the stored position is beyond the end")

    monkeypatch.setattr("services.projector.serve.run_projector", truncated)
    monkeypatch.setattr("services.read_models.migrate.engine_for", lambda _url: engine)
    monkeypatch.setattr(projector_cli, "bootstrap_or_exit", lambda kafka, topics: "unused:9092")
    app = projector_cli.projector_app
    with caplog.at_level(logging.ERROR, logger="services.projector"):
        result = CliRunner().invoke(
            app, ["--kafka", "127.0.0.1:1", "--database-url", "sqlite:///unused.db"]
        )
    assert result.exit_code == projector_cli.TRUNCATED_EXIT, result.output
    lines = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 1
    assert lines[0].__dict__["topic"] == BUDGETS
    assert (lines[0].__dict__["stored_offset"], lines[0].__dict__["end_offset"]) == (3, 1)
    assert "partition 0" in lines[0].getMessage()

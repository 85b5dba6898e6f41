"""Test-session wiring: one real broker per session, chosen by ``--broker``.

Real-broker tests never pass silently without a broker: when none can be started they are
*skipped* with the reason (shown by ``-ra`` and in the summary below), and with
``FAIRSHARE_REQUIRE_BROKER=1`` (set by ``.ci/run``) they *fail* instead.

``--broker-security sasl_ssl`` starts the session's Apache Kafka secured (TLS, SCRAM-SHA-512,
ACLs) and makes its admin principal this process's identity (``$FAIRSHARE_KAFKA_CONFIG``, which
the services the tests start inherit), so every real-broker test also runs over an
authenticated, encrypted connection. The default stays plain text: a secured broker costs
about two seconds more to start, and the roles' own refusals are tested on a secured broker of
their own either way (``tests/integration/test_kafka_security.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.brokers import BROKER_KINDS, BrokerHandle, BrokerStartError, start_broker
from services.brokers.security import SECURITY_KINDS, admin_settings_file
from services.bus.connection import KAFKA_CONFIG_ENV

_STATE: dict[str, str] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--broker",
        choices=BROKER_KINDS,
        default=os.environ.get("FAIRSHARE_TEST_BROKER", "apache-kafka"),
        help="broker the integration tests start and use (default: apache-kafka, "
        "or $FAIRSHARE_TEST_BROKER); 'external' uses $FAIRSHARE_KAFKA_BOOTSTRAP",
    )
    parser.addoption(
        "--broker-security",
        choices=SECURITY_KINDS,
        default=os.environ.get("FAIRSHARE_TEST_BROKER_SECURITY", "plaintext"),
        help="sasl_ssl: the session's Apache Kafka speaks only TLS with SCRAM-SHA-512 and "
        "ACLs, and the tests connect as its admin (default: plaintext, or "
        "$FAIRSHARE_TEST_BROKER_SECURITY); an external broker is reached as "
        "$FAIRSHARE_KAFKA_CONFIG says",
    )


def pytest_report_header(config: pytest.Config) -> str:
    required = os.environ.get("FAIRSHARE_REQUIRE_BROKER") == "1"
    broker, security = config.getoption("--broker"), config.getoption("--broker-security")
    return f"fairshare broker: {broker}, {security} (required: {required})"


def _required(name: str) -> bool:
    return os.environ.get(name) == "1"


@pytest.fixture(scope="session")
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerHandle]:
    kind = str(request.config.getoption("--broker"))
    security = str(request.config.getoption("--broker-security"))
    data_dir = Path(tmp_path_factory.mktemp(f"broker-{kind}"))
    try:
        handle = start_broker(kind, data_dir, security=None if kind == "external" else security)
    except BrokerStartError as error:
        _STATE["broker"] = f"NOT STARTED ({kind}): {error}"
        if _required("FAIRSHARE_REQUIRE_BROKER"):
            pytest.fail(f"real broker required but {kind} did not start: {error}")
        pytest.skip(f"no real broker ({kind}): {error}")
    _STATE["broker"] = f"{handle.description} (started by this test session)"
    before = os.environ.get(KAFKA_CONFIG_ENV)
    if handle.security_dir is not None:
        os.environ[KAFKA_CONFIG_ENV] = str(admin_settings_file(handle.security_dir))
    try:
        yield handle
    finally:
        handle.stop()
        if handle.security_dir is not None:
            if before is None:
                os.environ.pop(KAFKA_CONFIG_ENV, None)
            else:
                os.environ[KAFKA_CONFIG_ENV] = before


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    stats = terminalreporter.stats
    broker_tests = [
        report
        for outcome in ("passed", "failed", "skipped", "error")
        for report in stats.get(outcome, [])
        if getattr(report, "when", "call") in ("call", "setup") and "broker" in report.keywords
    ]
    if not broker_tests and "broker" not in _STATE:
        return
    ran = sum(1 for r in broker_tests if r.when == "call" and r.outcome == "passed")
    skipped = sum(1 for r in broker_tests if r.outcome == "skipped")
    terminalreporter.section("fairshare real broker")
    terminalreporter.write_line(f"broker: {_STATE.get('broker', 'not requested')}")
    terminalreporter.write_line(f"real-broker tests passed: {ran}, skipped: {skipped}")
    if skipped:
        terminalreporter.write_line("WARNING: real-broker tests were SKIPPED (see reasons above)")


DEFAULT_POSTGRES_URL = "postgresql+psycopg://fairshare:fairshare@127.0.0.1:5432/fairshare"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each database-backed test runs once per backend: a SQLite file and a real PostgreSQL.

    PostgreSQL comes from ``$FAIRSHARE_TEST_POSTGRES_URL`` or the default that
    ``.ci/start-postgres`` creates; without it the PostgreSQL case is skipped visibly, or fails
    under ``FAIRSHARE_REQUIRE_POSTGRES=1`` (CI).
    """
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fairshare.db'}"
    url = os.environ.get("FAIRSHARE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            connection.execute(text("select 1"))
    except OperationalError as error:
        reason = f"PostgreSQL not reachable at {url} (run `bash .ci/start-postgres`): {error}"
        if _required("FAIRSHARE_REQUIRE_POSTGRES"):
            pytest.fail(reason)
        pytest.skip(reason)
    finally:
        engine.dispose()
    return url


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run in which nothing passed is not green, even if pytest would exit 0 (all skipped)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    if not reporter.stats.get("passed"):
        reporter.write_line("ERROR: no test passed in this run", red=True)
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED

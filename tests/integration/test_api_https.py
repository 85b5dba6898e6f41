"""The API over HTTPS for real: uvicorn serving the app through ``serve.listener`` with a
certificate of a throwaway CA, and ``fairshare`` (the client CLI) reaching it with ``--ca``.
Without the CA, with another CA, or in plain HTTP, the client gets nothing, and the token it
would have sent never leaves it in clear. About a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from typer.testing import CliRunner

from events.envelope import new_event
from events.models import NodeRegistered
from services.api import create_app
from services.api.serve import Tls, listener
from services.api.tokens_file import TokensFile, add_token
from services.api.view import LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher
from services.cli import app
from tests.factories import T0
from tests.tls_certs import Issued, issue

runner = CliRunner()


@pytest.fixture
def issued(tmp_path: Path) -> Issued:
    (tmp_path / "pki").mkdir()
    return issue(tmp_path / "pki")


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    return tmp_path / "tokens.json"


@pytest.fixture
def ana(tokens: Path) -> str:
    """A token of ana's, in the file before the API starts (it re-reads it once a second)."""
    return add_token(tokens, "ana", expires_in_s=3600)


@pytest.fixture
def https_api(issued: Issued, tokens: Path, ana: str) -> Iterator[str]:
    """The API's address, ``https://127.0.0.1:PORT``, served until the test ends."""
    view = LiveView()
    node = NodeRegistered(node="n1", cluster="c", pool="p", gpus=4, gpu_type="H100")
    view.feed(new_event(node, source="tests", time=T0))
    api = create_app(view, InMemoryPublisher(InMemoryBroker()), TokensFile(tokens))
    server = uvicorn.Server(listener(api, "127.0.0.1", 0, Tls(issued.cert, issued.key)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "the server stopped while starting"
        assert time.monotonic() < deadline, "the server did not start in 10 s"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_client_reaches_the_api_over_https_with_its_ca(
    https_api: str, issued: Issued, ana: str
) -> None:
    result = runner.invoke(
        app, ["nodes", "--json", "--api", https_api, "--token", ana, "--ca", str(issued.ca)]
    )
    assert result.exit_code == 0, result.output
    assert '"node": "n1"' in result.stdout
    by_environment = runner.invoke(
        app,
        ["nodes", "--json", "--api", https_api, "--token", ana],
        env={"FAIRSHARE_API_CA": str(issued.ca)},
    )
    assert by_environment.exit_code == 0, by_environment.output


def test_without_the_ca_or_with_another_the_client_refuses(
    https_api: str, issued: Issued, ana: str, tmp_path: Path
) -> None:
    unknown = runner.invoke(app, ["nodes", "--api", https_api, "--token", ana])
    assert unknown.exit_code == 1, unknown.output
    assert "CERTIFICATE_VERIFY_FAILED" in unknown.stderr
    (tmp_path / "other").mkdir()
    other = issue(tmp_path / "other")
    wrong = runner.invoke(app, ["nodes", "--api", https_api, "--token", ana, "--ca", str(other.ca)])
    assert wrong.exit_code == 1, wrong.output
    assert "CERTIFICATE_VERIFY_FAILED" in wrong.stderr


def test_plain_http_to_the_tls_port_gets_nothing(
    https_api: str, issued: Issued, tokens: Path, ana: str
) -> None:
    plain = https_api.replace("https://", "http://")
    result = runner.invoke(app, ["nodes", "--api", plain, "--token", ana, "--ca", str(issued.ca)])
    assert result.exit_code == 1, result.output
    assert "cannot reach the API" in result.stderr


def test_a_token_renewed_while_serving_is_refused_within_a_second(
    https_api: str, issued: Issued, tokens: Path, ana: str
) -> None:
    ca = ["--ca", str(issued.ca)]
    assert runner.invoke(app, ["nodes", "--api", https_api, "--token", ana, *ca]).exit_code == 0
    renewed = runner.invoke(app, ["tokens", "renew", "ana", "--file", str(tokens)])
    assert renewed.exit_code == 0, renewed.output
    time.sleep(1.1)
    old = runner.invoke(app, ["nodes", "--api", https_api, "--token", ana, *ca])
    assert old.exit_code == 1
    assert "does not know this token" in old.stderr
    new = renewed.stdout.strip()
    assert runner.invoke(app, ["nodes", "--api", https_api, "--token", new, *ca]).exit_code == 0

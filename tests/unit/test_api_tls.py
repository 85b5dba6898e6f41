"""``fairshare api serve`` over HTTPS: the certificate and key are checked before anything
starts (both or neither, readable, the key its owner's alone, a pair), and plain HTTP is
refused where others can connect unless ``--insecure-http`` says a TLS proxy is in front."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from services.api import serve
from services.api.tokens_file import add_token
from services.cli import app
from tests.tls_certs import Issued, issue

runner = CliRunner()


@pytest.fixture
def issued(tmp_path: Path) -> Issued:
    return issue(tmp_path)


def test_a_certificate_and_its_key_are_served(issued: Issued) -> None:
    assert serve.tls_files(issued.cert, issued.key) == serve.Tls(issued.cert, issued.key)
    assert serve.tls_files(None, None) is None


def test_one_without_the_other_is_refused(issued: Issued) -> None:
    with pytest.raises(serve.TransportError, match="--tls-cert was given without --tls-key"):
        serve.tls_files(issued.cert, None)
    with pytest.raises(serve.TransportError, match="--tls-key was given without --tls-cert"):
        serve.tls_files(None, issued.key)


def test_a_file_that_cannot_be_read_is_refused(issued: Issued, tmp_path: Path) -> None:
    with pytest.raises(serve.TransportError, match="--tls-cert: cannot read"):
        serve.tls_files(tmp_path / "absent.pem", issued.key)
    with pytest.raises(serve.TransportError, match="--tls-key: cannot read"):
        serve.tls_files(issued.cert, tmp_path)  # a folder


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o606])
def test_a_key_open_to_other_users_is_refused(issued: Issued, mode: int) -> None:
    os.chmod(issued.key, mode)
    with pytest.raises(serve.TransportError, match="open to other users") as refused:
        serve.tls_files(issued.cert, issued.key)
    assert f"chmod 600 {issued.key}" in str(refused.value)


def test_a_key_of_another_certificate_is_refused(issued: Issued, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    other = issue(tmp_path / "other")
    with pytest.raises(serve.TransportError, match="not a PEM certificate and its private key"):
        serve.tls_files(issued.cert, other.key)
    with pytest.raises(serve.TransportError, match="not a PEM certificate"):
        serve.tls_files(issued.ca.parent / "server.key", issued.key)  # a key, not a cert


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "api.example.org"])
def test_plain_http_off_loopback_needs_the_escape_hatch(
    host: str, issued: Issued, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(serve.TransportError, match="refusing to serve plain HTTP") as refused:
        serve.check_transport(host, None)
    assert "--tls-cert FILE --tls-key FILE" in str(refused.value)
    assert "--insecure-http" in str(refused.value)
    serve.check_transport(host, serve.Tls(issued.cert, issued.key))
    with caplog.at_level(logging.WARNING, logger="services.api.serve"):
        serve.check_transport(host, None, insecure_http=True)
    assert "plain HTTP" in caplog.text


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_plain_http_on_loopback_is_fine(host: str) -> None:
    serve.check_transport(host, None)


def test_api_serve_refuses_plain_http_off_loopback_with_exit_2(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    add_token(tokens, "ana")
    command = ["api", "serve", "--kafka", "192.0.2.1:9", "--host", "0.0.0.0", "--tokens"]
    result = runner.invoke(app, [*command, str(tokens)])
    assert result.exit_code == 2, result.output
    assert "refusing to serve plain HTTP on 0.0.0.0" in result.stderr


def test_api_serve_checks_the_tls_files_from_the_environment(issued: Issued) -> None:
    """FAIRSHARE_API_TLS_CERT and _KEY are the options' variables; a bad key stops the start
    (exit 2, the reason) before Kafka, whose address here nothing answers."""
    os.chmod(issued.key, 0o644)
    environment = {
        "FAIRSHARE_API_TLS_CERT": str(issued.cert),
        "FAIRSHARE_API_TLS_KEY": str(issued.key),
    }
    result = runner.invoke(app, ["api", "serve", "--kafka", "192.0.2.1:9"], env=environment)
    assert result.exit_code == 2, result.output
    assert "open to other users" in result.stderr
    only_cert = runner.invoke(
        app, ["api", "serve", "--kafka", "192.0.2.1:9", "--tls-cert", str(issued.cert)]
    )
    assert only_cert.exit_code == 2, only_cert.output
    assert "without --tls-key" in only_cert.stderr


def test_the_listener_serves_https_with_the_files(issued: Issued) -> None:
    tls = serve.Tls(issued.cert, issued.key)
    config = serve.listener(FastAPI(), "127.0.0.1", 0, tls)
    assert config.ssl_certfile == issued.cert
    assert config.ssl_keyfile == issued.key
    assert serve.listener(FastAPI(), "127.0.0.1", 0).ssl_certfile is None

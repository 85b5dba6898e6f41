"""API tokens: kept only as SHA-256 hashes (in memory and in the tokens file), recognised by a
constant-time comparison with every entry, created by ``fairshare tokens add``, and the demo
tokens served on a loopback address only."""

from __future__ import annotations

import hashlib
import hmac
import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.api import serve
from services.api.auth import DEMO_TOKENS, Principal, TokenFileError, TokenTable, load_tokens
from services.api.tokens import default_tokens, hash_token
from services.api.tokens_file import add_token, read_document, remove_tokens
from services.cli import app

runner = CliRunner()


def test_the_table_holds_hashes_and_recognises_only_the_token() -> None:
    table = default_tokens()
    assert "admin-token" not in table  # a lookup of the raw token finds nothing
    assert set(table) == {hashlib.sha256(t.encode()).hexdigest() for t in DEMO_TOKENS}
    assert table.authenticate("admin-token") == Principal("admin", admin=True)
    assert table.authenticate("ana-token") == Principal("ana")
    for wrong in ("", "admin-toke", "admin-token ", "ADMIN-TOKEN", hash_token("admin-token")):
        assert table.authenticate(wrong) is None, wrong


def test_every_entry_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The presented token's hash meets every stored hash through hmac.compare_digest, whether
    it matches the first entry, the last or none: no early exit, no dict lookup."""
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    table = default_tokens()
    for token in ("admin-token", "chen-token", "nobody-at-all"):
        calls.clear()
        table.authenticate(token)
        assert len(calls) == len(table), token
        assert {a for a, _ in calls} == {h.encode() for h in table}
        assert {b for _, b in calls} == {hash_token(token).encode()}


def test_add_stores_the_hash_never_the_token(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "tokens.json"
    ana = add_token(path, "ana")
    root = add_token(path, "root", admin=True)
    text = path.read_text()
    assert ana not in text
    assert root not in text
    assert len(ana) >= 43  # 32 random bytes
    assert ana != root
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    document = json.loads(text)
    assert document["version"] == 2
    assert [(t["user"], t["admin"], t["sha256"]) for t in document["tokens"]] == [
        ("ana", False, hash_token(ana)),
        ("root", True, hash_token(root)),
    ]
    table = load_tokens(path)
    assert isinstance(table, TokenTable)
    assert table.authenticate(ana) == Principal("ana")
    assert table.authenticate(root) == Principal("root", admin=True)
    assert table.authenticate("admin-token") is None
    assert list(tmp_path.joinpath("secrets").iterdir()) == [path]  # no temporary file left

    assert remove_tokens(path, "ana") == 1
    assert load_tokens(path).authenticate(ana) is None
    assert load_tokens(path).authenticate(root) == Principal("root", admin=True)
    assert remove_tokens(path, "ana") == 0


def test_a_file_of_tokens_in_clear_is_refused(tmp_path: Path) -> None:
    """The first format ({"<token>": {"user": ...}}) kept the tokens themselves: refused, with
    the way out, never served."""
    path = tmp_path / "tokens.json"
    path.write_text('{"s3cret-token-1": {"user": "ana"}, "s3cret-token-2": {"user": "root"}}')
    with pytest.raises(TokenFileError, match="in clear") as refused:
        load_tokens(path)
    assert "fairshare tokens add" in str(refused.value)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"version": 1, "tokens": [{"user": "has space", "sha256": "%s"}]}', "tokens.0.user"),
        ('{"version": 1, "tokens": [{"user": "ana", "sha256": "abc"}]}', "tokens.0.sha256"),
        ('{"version": 1, "tokens": [{"user": "ana", "sha256": "%s", "x": 1}]}', "tokens.0.x"),
        ('{"version": 3, "tokens": []}', "version"),
        ('{"version": 2, "tokens": [{"user": "ana", "sha256": "%s", "expires": "soon"}]}',
         "tokens.0.expires"),
        ('{"version": 2, "tokens": [{"user": "ana", "sha256": "%s", '
         '"expires": "2027-01-01T00:00:00"}]}', "time zone"),
        ('{"version": 1, "tokens": [{"user": "a", "sha256": "%s"}, {"user": "b", '
         '"sha256": "%s"}]}', "listed twice"),
        ("[1]", "JSON object"),
        ("{", "not JSON"),
    ],
)  # fmt: skip
def test_invalid_tokens_files_say_what_is_wrong(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "tokens.json"
    digest = hash_token("x" * 43)
    path.write_text(content.replace("%s", digest))
    with pytest.raises(TokenFileError, match=needle):
        read_document(path)


def test_a_missing_file_is_an_error_not_an_empty_table(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read"):
        load_tokens(tmp_path / "absent.json")


def test_fairshare_tokens_add_prints_the_token_once(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    result = runner.invoke(app, ["tokens", "add", "ana", "--file", str(path)])
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert "\n" not in token
    assert token not in path.read_text()
    assert load_tokens(path).authenticate(token) == Principal("ana")
    admin = runner.invoke(app, ["tokens", "add", "root", "--admin", "--file", str(path)])
    assert admin.exit_code == 0, admin.output
    assert load_tokens(path).authenticate(admin.stdout.strip()) == Principal("root", True)

    listed = runner.invoke(app, ["tokens", "list", "--file", str(path)])
    assert listed.exit_code == 0, listed.output
    assert [line.split("\t")[:2] for line in listed.stdout.splitlines()] == [
        ["ana", "user"],
        ["root", "admin"],
    ]
    assert token not in listed.stdout

    bad = runner.invoke(app, ["tokens", "add", "has space", "--file", str(path)])
    assert bad.exit_code == 2
    assert "user 'has space'" in bad.stderr
    removed = runner.invoke(app, ["tokens", "remove", "ana", "--file", str(path)])
    assert removed.exit_code == 0, removed.output
    assert load_tokens(path).authenticate(token) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_demo_tokens_are_served_on_a_loopback_host(host: str) -> None:
    assert serve.tokens_for(None, host) == default_tokens()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "api.example.org", ""])
def test_demo_tokens_are_refused_on_any_other_host(host: str, tmp_path: Path) -> None:
    with pytest.raises(serve.DemoTokensError, match="not a loopback address"):
        serve.tokens_for(None, host)
    path = tmp_path / "tokens.json"
    token = add_token(path, "ana")
    assert serve.tokens_for(path, host).current().authenticate(token) == Principal("ana")


def test_serve_refuses_demo_tokens_on_all_interfaces_before_touching_kafka() -> None:
    # an address nothing listens on: reaching Kafka first would hang or fail differently
    with pytest.raises(serve.DemoTokensError):
        serve.serve("192.0.2.1:9", host="0.0.0.0")


def test_api_serve_exits_2_with_the_reason() -> None:
    result = runner.invoke(app, ["api", "serve", "--kafka", "192.0.2.1:9", "--host", "0.0.0.0"])
    assert result.exit_code == 2, result.output
    assert "refusing to serve the demo tokens" in result.stderr
    assert "--tokens FILE" in result.stderr

"""Tokens that expire: a date in the tokens file, checked on every request after the
constant-time comparison; ``fairshare tokens renew``; files written before expiry keep working
(never expiring, marked to renew); the API re-reads the file when it changes; the dashboard's
cookie lasts no longer than its token."""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from events.envelope import new_event
from events.models import BudgetCreated
from services.api import create_app
from services.api.tokens import Principal, hash_token
from services.api.tokens_file import (
    DEFAULT_EXPIRY_S,
    NEVER,
    TokenFileError,
    TokensFile,
    add_token,
    load_tokens,
    read_document,
    renew_token,
    timestamp,
)
from services.api.view import LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher
from services.cli import app
from services.client.api import ApiError, FairshareClient
from services.client.commands.common import _for_people
from tests.factories import T0

runner = CliRunner()
DAY = 86400.0


def test_a_new_token_expires_in_90_days_unless_told(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    now = time.time()
    default = add_token(path, "ana", now=now)
    short = add_token(path, "bo", expires_in_s=3600, now=now)
    forever = add_token(path, "ci", expires_in_s=None, now=now)
    records = {r.user: r for r in read_document(path).tokens}
    assert records["ana"].expires == timestamp(now + DEFAULT_EXPIRY_S)
    assert DEFAULT_EXPIRY_S == 90 * DAY
    assert records["bo"].expires == timestamp(now + 3600)
    assert records["ci"].expires == NEVER
    table = load_tokens(path)
    assert table.authenticate(default, now=now + 89 * DAY) == Principal("ana")
    assert table.authenticate(default, now=now + 91 * DAY) is None
    assert table.authenticate(short, now=now + 3599) == Principal("bo")
    assert table.authenticate(short, now=now + 3601) is None
    assert table.authenticate(forever, now=now + 10_000 * DAY) == Principal("ci")
    found = table.match(short)
    assert found is not None
    assert found.expired(now + 3601)


def test_an_expired_token_is_compared_like_any_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The date is read only after every entry was compared: an expired token, a valid one and
    an unknown one each cost one compare_digest per entry."""
    path = tmp_path / "tokens.json"
    expired = add_token(path, "ana", expires_in_s=1, now=time.time() - 10)
    valid = add_token(path, "bo")
    add_token(path, "ci")
    table = load_tokens(path)
    calls: list[bytes] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(a)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for token in (expired, valid, "nobody"):
        calls.clear()
        table.authenticate(token)
        assert len(calls) == len(table) == 3, token


def test_a_file_without_dates_keeps_working_and_is_marked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Version 1 had no ``expires``: its tokens never expire (an upgrade must not lock
    everyone out), the API warns at start and ``tokens list`` says to renew them."""
    path = tmp_path / "tokens.json"
    entry = {"user": "ana", "sha256": hash_token("t" * 43)}
    old = {"version": 1, "tokens": [entry]}
    path.write_text(json.dumps(old))
    assert load_tokens(path).authenticate("t" * 43, now=time.time() + 10_000 * DAY) is not None
    with caplog.at_level(logging.WARNING, logger="services.api.tokens_file"):
        TokensFile(path)
    assert "never expire" in caplog.text
    assert "fairshare tokens renew" in caplog.text
    listed = runner.invoke(app, ["tokens", "list", "--file", str(path)])
    assert listed.exit_code == 0, listed.output
    assert "no expiry (old file): renew" in listed.stdout
    assert "fairshare tokens renew USER" in listed.stderr

    add_token(path, "bo")  # any change writes the current version, the old entry as it was
    document = json.loads(path.read_text())
    assert document["version"] == 2
    assert document["tokens"][0] == {
        **entry,
        "admin": False,
        "added": "",
        "expires": None,
    }


def test_tokens_list_shows_each_expiry(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    add_token(path, "ana", expires_in_s=30 * DAY)
    add_token(path, "old", expires_in_s=1, now=time.time() - DAY)
    add_token(path, "ci", expires_in_s=None)
    listed = runner.invoke(app, ["tokens", "list", "--file", str(path)])
    assert listed.exit_code == 0, listed.output
    rows = {line.split("\t")[0]: line.split("\t")[3] for line in listed.stdout.splitlines()}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rows["ana"])
    assert rows["old"].startswith("EXPIRED ")
    assert rows["ci"] == "never"


def test_tokens_add_takes_a_lifetime_or_none(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    added = runner.invoke(app, ["tokens", "add", "ana", "--expires-in", "30d", "--file", str(path)])
    assert added.exit_code == 0, added.output
    assert "it expires at " in added.stderr
    expires_at = read_document(path).tokens[0].expires_at
    assert expires_at is not None
    assert abs(expires_at - (time.time() + 30 * DAY)) < 60
    service = runner.invoke(app, ["tokens", "add", "ci", "--no-expiry", "--file", str(path)])
    assert service.exit_code == 0, service.output
    assert "it never expires" in service.stderr
    both = ["tokens", "add", "x", "--no-expiry", "--expires-in", "1d", "--file", str(path)]
    assert runner.invoke(app, both).exit_code == 2
    for bad in ("soon", "0"):
        refused = runner.invoke(
            app, ["tokens", "add", "x", "--expires-in", bad, "--file", str(path)]
        )
        assert refused.exit_code == 2, bad
    assert [r.user for r in read_document(path).tokens] == ["ana", "ci"]


def test_renew_replaces_every_token_of_the_user(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    first = add_token(path, "root", admin=True)
    second = add_token(path, "root", admin=True)
    other = add_token(path, "ana")
    renewed = runner.invoke(
        app, ["tokens", "renew", "root", "--expires-in", "7d", "--file", str(path)]
    )
    assert renewed.exit_code == 0, renewed.output
    token = renewed.stdout.strip()
    assert "\n" not in token
    assert token not in path.read_text()
    assert "old tokens are refused" in renewed.stderr
    table = load_tokens(path)
    assert table.authenticate(token) == Principal("root", admin=True)
    assert table.authenticate(first) is None
    assert table.authenticate(second) is None
    assert table.authenticate(other) == Principal("ana")
    found = table.match(token)
    assert found is not None
    assert found.expires_at is not None
    assert abs(found.expires_at - (time.time() + 7 * DAY)) < 60

    nobody = runner.invoke(app, ["tokens", "renew", "nobody", "--file", str(path)])
    assert nobody.exit_code == 1
    assert "holds no token" in nobody.stderr


def test_renew_refuses_a_user_with_both_kinds(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    add_token(path, "ana")
    add_token(path, "ana", admin=True)
    with pytest.raises(TokenFileError, match="tokens of several kinds"):
        renew_token(path, "ana")
    assert len(read_document(path).tokens) == 2


# -- the file as the API serves it ------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_file_is_re_read_when_it_changes_at_most_once_a_second(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    ana = add_token(path, "ana")
    clock = Clock()
    tokens = TokensFile(path, clock=clock)
    assert tokens.current().authenticate(ana) == Principal("ana")
    bo = add_token(path, "bo")
    clock.now += 0.5
    assert tokens.current().authenticate(bo) is None  # not looked at yet
    clock.now += 0.6
    assert tokens.current().authenticate(bo) == Principal("bo")
    renewed = renew_token(path, "ana")
    clock.now += 1.1
    assert tokens.current().authenticate(ana) is None
    assert tokens.current().authenticate(renewed) == Principal("ana")


def test_an_unreadable_version_keeps_the_last_good_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens.json"
    ana = add_token(path, "ana")
    clock = Clock()
    tokens = TokensFile(path, clock=clock)
    path.write_text("{ half an edit")
    clock.now += 2
    with caplog.at_level(logging.ERROR, logger="services.api.tokens_file"):
        assert tokens.current().authenticate(ana) == Principal("ana")
    assert "keeping the last good one" in caplog.text
    bo = add_token(path.with_name("fixed.json"), "bo")
    path.with_name("fixed.json").replace(path)
    clock.now += 2
    assert tokens.current().authenticate(bo) == Principal("bo")
    assert tokens.current().authenticate(ana) is None


def test_concurrent_requests_read_a_change_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.api import tokens_file

    path = tmp_path / "tokens.json"
    add_token(path, "ana")
    clock = Clock()
    tokens = TokensFile(path, clock=clock)
    add_token(path, "bo")
    reads: list[Path] = []
    real = tokens_file.read_document

    def counted(where: str | Path) -> tokens_file.TokensDocument:
        reads.append(Path(where))
        time.sleep(0.01)  # let the other threads arrive while this one reads
        return real(where)

    monkeypatch.setattr(tokens_file, "read_document", counted)
    clock.now += 2
    threads = [threading.Thread(target=tokens.current) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reads == [path]
    assert len(tokens.current()) == 2


# -- over HTTP --------------------------------------------------------------------------------
@pytest.fixture
def tokens_path(tmp_path: Path) -> Path:
    return tmp_path / "tokens.json"


@pytest.fixture
def client(tokens_path: Path) -> Iterator[TestClient]:
    add_token(tokens_path, "root", admin=True)
    view = LiveView()
    view.feed(new_event(BudgetCreated(budget="lab", created_by="admin"), source="tests", time=T0))
    app = create_app(
        view, InMemoryPublisher(InMemoryBroker()), TokensFile(tokens_path, check_every_s=0)
    )
    with TestClient(app) as client:
        yield client


def test_an_expired_token_is_told_so_and_how_to_renew(
    client: TestClient, tokens_path: Path
) -> None:
    expired = add_token(tokens_path, "ana", expires_in_s=1, now=time.time() - DAY)
    answer = client.get("/me", headers={"Authorization": f"Bearer {expired}"})
    assert answer.status_code == 401
    detail = answer.json()["detail"]
    assert "expired" in detail
    assert "fairshare tokens renew" in detail
    unknown = client.get("/me", headers={"Authorization": "Bearer not-a-token"})
    assert unknown.status_code == 401
    assert unknown.json()["detail"] == "unknown bearer token"
    client.cookies.set("fairshare_session", expired)
    cookie = client.get("/me")
    client.cookies.clear()
    assert cookie.status_code == 401
    assert "expired" in cookie.json()["detail"]
    sign_in = client.post("/dashboard/session", json={"token": expired})
    assert sign_in.status_code == 401
    assert "expired" in sign_in.json()["detail"]


def test_a_removed_token_is_refused_without_a_restart(
    client: TestClient, tokens_path: Path
) -> None:
    ana = add_token(tokens_path, "ana")
    assert client.get("/me", headers={"Authorization": f"Bearer {ana}"}).status_code == 200
    runner.invoke(app, ["tokens", "remove", "ana", "--file", str(tokens_path)])
    assert client.get("/me", headers={"Authorization": f"Bearer {ana}"}).status_code == 401


def test_the_session_cookie_does_not_outlive_its_token(
    client: TestClient, tokens_path: Path
) -> None:
    soon = add_token(tokens_path, "ana", expires_in_s=600)
    signed_in = client.post("/dashboard/session", json={"token": soon})
    assert signed_in.status_code == 200, signed_in.text
    max_age = re.search(r"Max-Age=(\d+)", signed_in.headers["set-cookie"])
    assert max_age is not None
    assert 590 <= int(max_age.group(1)) <= 600
    later = add_token(tokens_path, "bo")  # 90 days: the session's own 12 hours are shorter
    signed_in = client.post("/dashboard/session", json={"token": later})
    assert "Max-Age=43200" in signed_in.headers["set-cookie"]


def test_the_client_says_the_token_expired() -> None:
    error = ApiError(401, "this token expired at 2026-01-01T00:00:00Z: ask an admin ...")
    assert "expired at 2026-01-01" in _for_people(error)
    assert "does not know this token" in _for_people(ApiError(401, "unknown bearer token"))


def test_a_ca_file_that_cannot_be_read_is_an_api_error(tmp_path: Path) -> None:
    with pytest.raises(ApiError, match="cannot use the CA certificate"):
        FairshareClient("https://127.0.0.1:1", "t", ca=tmp_path / "absent.pem")
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("no certificate here")
    with pytest.raises(ApiError, match="cannot use the CA certificate"):
        FairshareClient("https://127.0.0.1:1", "t", ca=not_pem)


def test_a_finance_token_is_written_only_where_it_is_one_and_renews_as_one(tmp_path: Path) -> None:
    """``finance`` is left out of the file where false, so an API from before the role reads
    the files written now; a finance token renews as a finance token."""
    path = tmp_path / "tokens.json"
    add_token(path, "ana")
    token = add_token(path, "fin", finance=True)
    written = json.loads(path.read_text())["tokens"]
    assert ["finance" in r for r in written] == [False, True]
    assert load_tokens(path).authenticate(token).finance  # type: ignore[union-attr]
    renewed = renew_token(path, "fin")
    assert load_tokens(path).authenticate(renewed).finance  # type: ignore[union-attr]

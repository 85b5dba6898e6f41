"""``fairshare up`` sets list prices through the API once it answers: ``--price
POOL=AMOUNT[@ISO]`` with ``--currency``, checked before anything starts, or for the demo 2.50 EUR
per GPU-hour in each pool that has no price yet; a pool the API does not know yet (its agent has
not registered) is tried again, and a restart sets nothing twice."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from events import Topics
from events.models import NodeRegistered
from services.api.tokens_file import add_token
from services.cli import app
from services.client.api import FairshareClient
from services.launcher import cli as launcher_cli
from services.launcher.config import UpConfig, UpPrice
from services.launcher.prices import parse_price, price_token, set_up_prices, up_prices
from tests.unit.test_api import NOW, World, build_world

runner = CliRunner()


class _Broker:
    bootstrap = "127.0.0.1:1"
    description = "none"

    def stop(self) -> None:
        pass


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[UpConfig]:
    """What ``fairshare up`` would run, without a broker or services."""
    configs: list[UpConfig] = []
    monkeypatch.setattr(launcher_cli, "_broker_for_up", lambda *_: _Broker())
    monkeypatch.setattr(launcher_cli, "_run_up", lambda _b, config, _d: configs.append(config))
    return configs


@pytest.fixture
def world() -> World:
    return build_world()


def _config(**fields: Any) -> UpConfig:
    return UpConfig(
        bootstrap="127.0.0.1:9092",
        topics=Topics(),
        data_dir=Path("."),
        database_url="sqlite:///x.db",
        cluster="p",
        **fields,
    )


def _client(world: World) -> FairshareClient:
    return FairshareClient("http://api", "admin-token", http=world.client)


def _set(world: World, config: UpConfig, **options: Any) -> tuple[int, list[str]]:
    lines: list[str] = []
    done = set_up_prices(config, _client(world), lambda: False, lines.append, **options)
    return done, lines


def test_a_price_option_reads_pool_amount_and_time() -> None:
    assert parse_price("a100=2.35") == UpPrice("a100", "2.35")
    assert parse_price("a100=02.50@2026-12-01T00:00:00Z") == UpPrice(
        "a100", "2.50", "2026-12-01T00:00:00Z"
    )
    for bad, needle in (
        ("a100", "not POOL=AMOUNT"),
        ("=2", "not POOL=AMOUNT"),
        ("a100=", "not POOL=AMOUNT"),
        ("a100=2@", "not POOL=AMOUNT"),
        ("a100=-2", "never negative"),
        ("a100=2.1234567", "at most 6 decimals"),
        ("a100=2@tomorrow", "not an ISO time"),
        ("a100=2@2026-12-01T00:00:00", "no UTC offset"),
    ):
        with pytest.raises(ValueError, match=needle):
            parse_price(bad)


def test_up_takes_prices_and_a_currency(
    tmp_path: Path,
    started: list[UpConfig],
) -> None:
    args = ["up", "--data-dir", str(tmp_path), "--currency", "usd"]
    result = runner.invoke(app, [*args, "--price", "p=3", "--price", "q=1.5@2026-12-01T00:00Z"])
    assert result.exit_code == 0, result.output
    [config] = started
    assert config.currency == "USD"
    assert config.prices == (UpPrice("p", "3"), UpPrice("q", "1.5", "2026-12-01T00:00Z"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--price", "p=abc"], "--price: 'abc' is not a decimal amount"),
        (["--currency", "XYZ"], "--currency: XYZ is not an ISO 4217 code"),
    ],
)
def test_up_refuses_bad_prices_before_starting_anything(
    tmp_path: Path,
    started: list[UpConfig],
    args: list[str],
    needle: str,
) -> None:
    result = runner.invoke(app, ["up", "--data-dir", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert needle in " ".join(result.stderr.split())
    assert started == []


def test_with_a_tokens_file_prices_need_an_admins_token(
    tmp_path: Path,
    started: list[UpConfig],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokens = tmp_path / "tokens.json"
    add_token(tokens, "root", admin=True)
    monkeypatch.delenv("FAIRSHARE_TOKEN", raising=False)
    args = ["up", "--data-dir", str(tmp_path), "--tokens", str(tokens), "--price", "p=2"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2, refused.output
    assert "FAIRSHARE_TOKEN" in refused.stderr
    monkeypatch.setenv("FAIRSHARE_TOKEN", "root-token")
    assert runner.invoke(app, args).exit_code == 0
    [config] = started
    assert price_token(config) == "root-token"
    assert up_prices(_config(tokens_file=tokens)) == ((), False)  # no demo price then


def test_the_demo_prices_each_pool_once(world: World) -> None:
    config = _config()
    assert up_prices(config) == ((UpPrice("p", "2.50"),), True)
    assert price_token(config) == "admin-token"
    assert _set(world, config) == (
        1,
        ["price set: p: 2.50 EUR per GPU-hour from 2026-11-02T11:00:00Z"],
    )
    assert _set(world, config) == (0, ["price in force already: p: 2.50 EUR per GPU-hour"])
    [record] = world.records()
    assert (record.data.per_gpu_hour, record.data.currency, record.data.set_by) == (
        "2.50",
        "EUR",
        "admin",
    )


def test_a_pool_not_registered_yet_is_tried_again(world: World) -> None:
    def register(_seconds: float) -> None:
        node = NodeRegistered(node="q1", cluster="c", pool="q", gpus=4, gpu_type="H100")
        world.fact(node, NOW - timedelta(minutes=1))

    config = _config(prices=(UpPrice("q", "4", "2026-11-03T00:00:00Z"),))
    done, lines = _set(world, config, sleep=register)
    assert (done, lines) == (1, ["price set: q: 4 EUR per GPU-hour from 2026-11-03T00:00:00Z"])
    again = _set(world, config)
    assert again == (0, ["price in force already: q: 4 EUR per GPU-hour from 2026-11-03T00:00:00Z"])
    assert len(world.records()) == 1


def test_a_refused_price_is_reported_and_the_others_are_set(world: World) -> None:
    prices = (UpPrice("nowhere", "1"), UpPrice("p", "2", "2026-11-02T11:30:00Z"), UpPrice("p", "3"))
    done, lines = _set(world, _config(prices=prices, currency="USD"), timeout_s=0)
    assert done == 1
    assert lines[0].startswith(
        "price not set (nowhere: 1 USD per GPU-hour): HTTP 422: pool: unknown"
    )
    assert "on the hour" in lines[1]
    assert lines[2] == "price set: p: 3 USD per GPU-hour from 2026-11-02T11:00:00Z"

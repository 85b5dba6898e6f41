"""``fairshare report`` without read models: one line saying where it looked and what to do,
no traceback, and nothing created (an empty database left behind would hide the real one)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli import app

runner = CliRunner()


def _report(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(app, ["report", *args], env=env)
    return result.exit_code, result.stderr


@pytest.mark.parametrize("name", ["charges", "utilisation", "users"])
def test_no_database_is_one_line_and_creates_nothing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FAIRSHARE_DATABASE_URL", raising=False)
    monkeypatch.delenv("FAIRSHARE_DATA_DIR", raising=False)
    code, err = _report(name)
    assert code == 1
    assert err.count("\n") == 1, err
    assert err.startswith("error: no read models at .fairshare/fairshare.db")
    assert "fairshare up" in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_the_data_dir_is_where_it_looks(tmp_path: Path) -> None:
    code, err = _report("charges", env={"FAIRSHARE_DATA_DIR": str(tmp_path / "up")})
    assert code == 1
    assert f"no read models at {tmp_path / 'up' / 'fairshare.db'}" in err
    assert not (tmp_path / "up").exists()


def test_a_database_without_read_models_is_one_line_and_stays_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    before = empty.read_bytes()
    code, err = _report("users", "--database-url", f"sqlite:///{empty}")
    assert code == 1
    assert err.count("\n") == 1, err
    assert "holds no read models (no such table: projector_positions)" in err
    assert empty.read_bytes() == before


def test_a_file_that_is_no_database_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "fairshare.db"
    junk.write_text("not a database\n" * 100)
    code, err = _report("charges", "--data-dir", str(tmp_path))
    assert code == 1
    assert err.count("\n") == 1, err
    assert err.startswith("error: cannot read the read models at sqlite:///")

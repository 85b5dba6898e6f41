"""The keys of ``fairshare up`` and of every service: files only their owner reads, one signer
per role (an agent's per cluster), registered once, and publishers that sign what they send."""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from events import Topics
from events.models import BudgetCreated
from events.signing import Signer
from projections.trust import Trust
from services.bus.memory import InMemoryBroker, InMemoryPublisher
from services.bus.signing import (
    SIGNING_KEY_ENV,
    SigningKeyError,
    load_key,
    process_signer,
    signed,
    write_key,
)
from services.launcher.config import UpConfig
from services.launcher.keys import (
    EPOCH,
    admin_signatory,
    key_of,
    registrations,
    required_from,
    signatory_of,
)
from tests.signing import KEYS, fact, registration

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _config(data_dir: Path, **options: Any) -> UpConfig:
    return UpConfig("127.0.0.1:9092", Topics(), data_dir, "sqlite://", **options)


def test_a_key_file_is_its_owners_alone(tmp_path: Path) -> None:
    path = tmp_path / "k" / "api.key"
    write_key(path, KEYS.api)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_key(path).key_id == KEYS.api.key_id
    with pytest.raises(FileExistsError):
        write_key(path, KEYS.admin)  # never over a key in use
    path.chmod(0o640)
    with pytest.raises(SigningKeyError, match="readable by others"):
        load_key(path)


def test_a_process_signs_with_the_key_its_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = InMemoryBroker()
    plain = InMemoryPublisher(broker)
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    assert signed(plain) is plain
    path = tmp_path / "scheduler.key"
    write_key(path, KEYS.scheduler)
    monkeypatch.setenv(SIGNING_KEY_ENV, str(path))
    signer = process_signer()
    assert signer is not None
    assert signer.key_id == KEYS.scheduler.key_id
    publisher = signed(plain)
    publisher.publish(fact(BudgetCreated(budget="lab", created_by="x"), 0))
    publisher.flush()
    sent = broker.records(Topics().name(BudgetCreated.topic))
    assert len(sent) == 1
    headers = dict(sent[0].headers)
    assert headers["ce_signer"] == KEYS.scheduler.key_id.encode()


def test_each_service_of_up_signs_as_its_role(tmp_path: Path) -> None:
    config = _config(tmp_path, cluster="demo", slurm_cluster="hpc")
    keys = tmp_path / "keys"
    names = {
        "api": ("api", None, "api.key"),
        "scheduler": ("scheduler", None, "scheduler.key"),
        "scheduler-2": ("scheduler", None, "scheduler.key"),
        "charging-3": ("charging", None, "charging.key"),
        "agent": ("agent", "demo", "agent-demo.key"),
        "agent-slurm": ("agent", "hpc", "agent-hpc.key"),
    }
    for service, (role, cluster, file) in names.items():
        signatory = signatory_of(service, config)
        assert signatory is not None
        assert (signatory.role, signatory.cluster, signatory.path) == (role, cluster, keys / file)
    assert signatory_of("projector", config) is None
    assert signatory_of("agent-kubernetes", config) is None  # no such cluster in this stack


def test_up_makes_each_key_once_in_a_private_directory(tmp_path: Path) -> None:
    config = _config(tmp_path)
    admin = admin_signatory(config)
    first = key_of(admin)
    assert stat.S_IMODE(admin.path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(admin.path.stat().st_mode) == 0o600
    assert key_of(admin).key_id == first.key_id


def test_registrations_name_every_key_not_read_yet_the_admins_first(tmp_path: Path) -> None:
    config = _config(tmp_path, cluster="demo")
    admin = key_of(admin_signatory(config))
    services = [s for s in (signatory_of(n, config) for n in ("api", "agent")) if s]
    facts = registrations(admin, services, Trust(), EPOCH)
    assert [(f.role, f.cluster) for f in facts] == [
        ("admin", None),
        ("api", None),
        ("agent", "demo"),
    ]
    known = Trust()
    assert known.judge(fact(facts[0], 0, admin)) is None
    assert known.judge(fact(facts[1], 1, admin)) is None
    assert [f.role for f in registrations(admin, services, known, EPOCH)] == ["agent"]


def test_a_log_with_unsigned_history_requires_signatures_from_now_only() -> None:
    assert required_from(Trust(), history=False, now=NOW) == EPOCH
    assert required_from(Trust(), history=True, now=NOW) == NOW
    signed_from_start = Trust()
    assert signed_from_start.judge(registration(KEYS.admin, "admin", None, 10)) is None
    assert required_from(signed_from_start, history=True, now=NOW) == EPOCH
    migrated = Trust()
    since = datetime(2026, 1, 1, tzinfo=UTC)
    assert migrated.judge(registration(KEYS.admin, "admin", None, 10, required_from=since)) is None
    assert required_from(migrated, history=True, now=NOW) == NOW


def test_a_fresh_signer_round_trips_through_its_file(tmp_path: Path) -> None:
    signer = Signer.generate()
    write_key(tmp_path / "x.key", signer)
    again = load_key(tmp_path / "x.key")
    assert (again.key_id, again.public_key) == (signer.key_id, signer.public_key)


def test_keys_create_writes_a_private_key_once(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from services.launcher.keys_cli import keys_app

    runner = CliRunner()
    path = tmp_path / "api.key"
    made = runner.invoke(keys_app, ["create", str(path)])
    assert made.exit_code == 0, made.output
    signer = load_key(path)
    assert signer.key_id in made.output
    again = runner.invoke(keys_app, ["create", str(path)])
    assert again.exit_code == 2
    assert load_key(path).key_id == signer.key_id

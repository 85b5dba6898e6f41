"""Nothing acknowledged is lost, whatever is killed: ``fairshare bench chaos`` as a test.

The stack runs as ``fairshare up`` runs it (each service its own process, supervised, a
standby scheduler) on real Apache Kafka, while workloads are submitted through the API and
every part is killed with -9 in turn: the broker leading the workloads partition, the API
three times, charging, the projector, the agent and the scheduler holding the lease. Then the
log read back must hold every acknowledged submission, no command or charge twice, an audit
identical against the log and against the read models, and an API view and read models equal
to the offline fold of the log.

One run on the single-broker default (1,000 workloads), one on a three-broker cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.bench.chaos.bench import FAULTS, ChaosConfig, chaos_benchmark
from services.brokers import KafkaUnavailableError
from tests.real_kafka import no_kafka

pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(1200)]

#: The issue's bound: a standby leads within 30 s of the leader's kill -9.
FAILOVER_BOUND_S = 30.0


def _chaos(config: ChaosConfig, tmp_path: Path) -> dict[str, Any]:
    try:
        return chaos_benchmark(config, tmp_path, report=print)
    except KafkaUnavailableError as error:
        no_kafka(error)


def _assert_kept_every_promise(result: dict[str, Any], workloads: int) -> None:
    summary = {k: v for k, v in result.items() if not k.endswith("differences")}
    assert result["faults"] == len(FAULTS), summary
    assert result["acknowledged"] == workloads, summary  # every one, after retries
    assert result["lost"] == 0, result["lost_ids"]
    assert result["unfinished"] == 0, summary
    assert result["duplicate_command_ids"] == 0, summary
    assert result["duplicate_charge_ids"] == 0, summary
    assert result["charges"] > 0, summary
    assert result["audit_identical"], (
        result["audit_log_differences"],
        result["audit_read_models_differences"],
    )
    assert result["view_equals_log"], result["view_differences"]
    assert result["read_models_equal_log"], result["read_model_differences"]
    failover = result["failover"]
    assert failover["failover_s"] < FAILOVER_BOUND_S, failover
    assert failover["epoch_after"] > failover["epoch_before"], failover
    restarted = result["restarts_by_service"]
    for name in ("charging", "projector", "agent", failover["killed"]):
        assert restarted.get(name, 0) >= 1, restarted
    assert restarted.get("api", 0) >= 3, restarted
    assert result["unclean_stops"] == [], summary


def test_every_process_killed_during_1000_submissions_on_the_default_broker(
    tmp_path: Path,
) -> None:
    result = _chaos(ChaosConfig(workloads=1000, brokers=1, rate_per_s=25), tmp_path)
    _assert_kept_every_promise(result, 1000)
    assert result["broker_outage_s"] is not None


def test_every_process_killed_on_a_three_broker_cluster(tmp_path: Path) -> None:
    result = _chaos(ChaosConfig(workloads=300, brokers=3, rate_per_s=20), tmp_path)
    _assert_kept_every_promise(result, 300)

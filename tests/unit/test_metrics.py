"""The Prometheus metrics: what each service exports is in the docs' table (and nothing the
table names is missing), labels come from bounded sets, the text passes ``promtool check
metrics``, and each figure counts what it says it counts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from events.models import DecisionRecord, PlaceCommand, PreemptCommand
from projections.charging_state import ChargingState
from services.api import create_app, default_tokens
from services.api import metrics as api_metrics
from services.api.gauges import ViewGauges
from services.api.view import VIEW_KINDS, LiveView
from services.bus.follower import Follower
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.charging import metrics as charging_metrics
from services.metrics import endpoint, lag
from services.metrics.common import DEAD_LETTERS
from services.metrics.trust import watch_refusals
from services.scheduler import metrics as scheduler_metrics
from services.scheduler.metrics import Figures, SchedulerFigures, count_work, observe_published
from tests.processes import free_port
from tests.unit.scheduling_fixtures import T0, Scenario, shape
from tests.unit.test_follower_catch_up import TOPIC, SlowSource

ROOT = Path(__file__).resolve().parents[2]
#: Every label any metric of ours may carry: each takes its values from a bounded set.
BOUNDED_LABELS = {
    "pool", "budget", "state", "reason", "topic", "consumer", "kind", "allocated", "method",
    "route", "status",
}  # fmt: skip


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def _figures() -> SchedulerFigures:
    figures = SchedulerFigures()
    figures.figures = Figures(
        {("p", "lab/a", "pending"): (2, 5), ("p", "lab/a", "running"): (1, 4)},
        {"*": (3, True)},
    )
    return figures


def _charging_lag() -> charging_metrics.ChargingLag:
    state = ChargingState.new(3600)
    state.latest_time = 1_000.0
    return charging_metrics.ChargingLag(_Host(state, 990.0), clock=lambda: 1_010.0)


@dataclass
class _Host:
    state: ChargingState
    last_snapshot_end: float | None


class _Everything(Collector):
    """This process's registry (what every service exports) and the collectors each service
    registers for itself, in one exposition."""

    def collect(self) -> Iterator[Metric]:
        # a reader with a refusal, so that the counter has a sample with its labels
        watch_refusals("projector", lambda: {"unsigned": 1})
        yield from REGISTRY.collect()
        yield from _figures().collect()
        yield from _charging_lag().collect()
        yield from _api_gauges().collect()


def _api_gauges() -> ViewGauges:
    """The API's gauges over the API tests' world (a pool, budgets, a queue)."""
    from tests.unit.test_api import NOW, build_world

    world = build_world()
    return ViewGauges(world.view, lambda: NOW.timestamp(), 7 * 86_400)


def _families() -> list[Metric]:
    return [f for f in _Everything().collect() if f.name.startswith("fairshare_")]


def _documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The Metrics section's table: name -> (type, labels)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(fairshare_\w+)` \| (\w+) \|([^|]*)\|", section, re.M)
    return {name: (kind, tuple(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows}


def _exported() -> dict[str, tuple[str, tuple[str, ...]]]:
    exported = {}
    for family in _families():
        name = family.name + ("_total" if family.type == "counter" else "")
        labels: set[str] = set()
        for sample in family.samples:
            labels |= set(sample.labels) - {"le"}
        exported[name] = (family.type, tuple(sorted(labels)))
    return exported


@pytest.fixture(autouse=True)
def _some_labelled_samples() -> Iterator[None]:
    """Labelled metrics show their labels once they have a sample."""
    api_metrics.API_REQUEST_DURATION.labels("GET", "/health", "200").observe(0.01)
    scheduler_metrics.SUBMIT_TO_PLACED.labels("p", "true").observe(3)
    scheduler_metrics.PREEMPTIONS.labels("p", "drain").inc(0)
    charging_metrics.CHARGES.labels("p", "allocated").inc(0)
    DEAD_LETTERS.labels("tests", "t.workloads").inc(0)
    lag.watch(_FIXED_LAG)
    yield
    lag.unwatch(_FIXED_LAG)


class _Lag:
    def lag(self) -> dict[tuple[str, int], int]:
        return {("t.workloads", 0): 3, ("t.workloads", 1): 4, ("t.heartbeats", 0): 0}


_FIXED_LAG = _Lag()


def test_the_docs_table_lists_exactly_the_metrics_exported_with_their_types_and_labels() -> None:
    documented = {
        name: (kind, tuple(sorted(labels))) for name, (kind, labels) in _documented().items()
    }
    assert documented == _exported()


def test_names_follow_the_conventions_and_labels_are_bounded() -> None:
    for family in _families():
        assert re.fullmatch(r"fairshare_[a-z_]+", family.name), family.name
        assert family.documentation, family.name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} <= BOUNDED_LABELS, (family.name, sample.labels)
    # no unit but a base one, and no counter without _total in what is exposed
    text = _exposition()
    assert not re.search(r"^fairshare_\w*(milli|micro|percent|minutes|hours)", text, re.M)


def _exposition() -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Everything())
    return generate_latest(registry).decode()


def test_the_exposition_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("FAIRSHARE_REQUIRE_PROMETHEUS"):
            pytest.fail("promtool is required here (apt-get install prometheus)")
        pytest.skip("promtool not installed (Debian's prometheus package)")
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=_exposition(), capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_consumer_lag_is_the_furthest_behind_reader_per_topic() -> None:
    class Other:
        def lag(self) -> dict[tuple[str, int], int]:
            return {("t.workloads", 0): 10, ("t.ledger", 0): 2}

    class Closed:
        def lag(self) -> dict[tuple[str, int], int]:
            raise RuntimeError("consumer closed")

    assert lag.lag_by_topic([_Lag(), Other(), Closed()]) == {
        "t.workloads": 10,
        "t.heartbeats": 0,
        "t.ledger": 2,
    }
    assert _sample("fairshare_consumer_lag_records", {"topic": "t.workloads"}) >= 7


def test_a_follower_reports_its_lag_until_it_is_closed() -> None:
    source = SlowSource(records=50, per_fetch=20, fetch_s=0)
    follower = Follower(source)
    assert follower.lag() == {(TOPIC, 0): 50}
    follower.poll(timeout_s=0)
    assert follower.lag() == {(TOPIC, 0): 30}
    assert _sample("fairshare_consumer_lag_records", {"topic": TOPIC}) == 30
    follower.close()
    assert _sample("fairshare_consumer_lag_records", {"topic": TOPIC}) == 0


def test_pending_and_running_work_are_counted_per_pool_and_budget() -> None:
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0)), nodes=(("n0", 4), ("m0", 4)))
    s.add_node("q0", 8, pool="q")
    s.running("r1", "a", (("n0", (0, 1)),), started_at=T0)
    s.submit("w1", "a", gpus=3)
    s.submit("w2", "a", gpus=1)
    s.submit("w3", "b", gpus=2, pools=("p", "q"))  # in both pools' queues
    everything = count_work(s.cluster, None)
    assert everything == {
        ("p", "a", "running"): (1, 2),
        ("p", "a", "pending"): (2, 4),
        ("p", "b", "pending"): (1, 2),
        ("q", "b", "pending"): (1, 2),
    }
    assert count_work(s.cluster, ["q"]) == {("q", "b", "pending"): (1, 2)}
    assert count_work(s.cluster, ()) == {}


def test_a_first_placement_is_timed_and_preemptions_are_counted_by_reason() -> None:
    s = Scenario()
    s.submit("w1", "a", at=T0)
    s.submit("w2", "a", at=T0)
    decision = DecisionRecord(pass_id=1, input_position=(), reason="fairshare")
    place = {
        "cluster": "c1", "pool": "zz", "budget": "a", "allocated": True, "min_runtime_s": 600,
        "placement": shape((("n0", (0,)),)), "decision": decision,
    }  # fmt: skip
    labels = {"pool": "zz", "allocated": "true"}
    before = _sample("fairshare_submit_to_placed_seconds_count", labels)
    before_sum = _sample("fairshare_submit_to_placed_seconds_sum", labels)
    preempted = {"pool": "zz", "reason": "drain"}
    before_preempted = _sample("fairshare_preemptions_total", preempted)
    observe_published(
        [
            PlaceCommand(command_id="c-1", workload_id="w1", attempt=1, **place),
            PlaceCommand(command_id="c-2", workload_id="w2", attempt=2, **place),  # a requeue
            PreemptCommand(
                command_id="c-3",
                cluster="c1",
                pool="zz",
                workload_id="w2",
                attempt=1,
                requeue=True,
                decision=DecisionRecord(pass_id=1, input_position=(), reason="drain"),
            ),
        ],
        s.cluster.workloads,
        now=T0 + 42,
    )
    assert _sample("fairshare_submit_to_placed_seconds_count", labels) == before + 1
    assert _sample("fairshare_submit_to_placed_seconds_sum", labels) == before_sum + 42
    assert _sample("fairshare_preemptions_total", preempted) == before_preempted + 1


def test_the_scheduler_reports_the_pools_it_leads_and_every_lease() -> None:
    from tests.factories import submitted
    from tests.unit.test_scheduler_pool_leases import _service

    service, follower, _clock, _published, leases = _service()
    service.step()
    leases.leading = {"p2": 4}
    follower.batches.append(
        [submitted(f"w-{p}", budget="lab/a", pools=(p,), gpus=20) for p in ("p1", "p2")]
    )
    service.step()
    service.refresh_figures()
    figures = service.figures.figures
    assert figures.leases == {"p1": (0, False), "p2": (4, True)}
    assert figures.counts == {("p2", "lab/a", "pending"): (1, 20)}, "too big: still pending"
    text = generate_latest(_registry(service.figures)).decode()
    assert 'fairshare_scheduler_leader{pool="p2"} 1.0' in text
    assert 'fairshare_scheduler_lease_epoch{pool="p2"} 4.0' in text
    assert 'fairshare_workloads{budget="lab/a",pool="p2",state="pending"} 1.0' in text


def _registry(*collectors: Collector) -> CollectorRegistry:
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    return registry


def test_charging_lag_is_the_age_of_what_it_folded_and_published() -> None:
    text = generate_latest(_registry(_charging_lag())).decode()
    assert "fairshare_charging_lag_seconds 10.0" in text
    assert "fairshare_usage_snapshot_lag_seconds 20.0" in text
    host = _Host(ChargingState.new(3600), None)
    empty = generate_latest(_registry(charging_metrics.ChargingLag(host))).decode()
    assert "\nfairshare_charging_lag_seconds " not in empty, "nothing folded: no age to report"
    state = ChargingState.new(3600)
    state.latest_time = 1_000.0
    caught_up = charging_metrics.ChargingLag(
        _Host(state, None), behind=lambda: False, clock=lambda: 1_300.0
    )
    text = generate_latest(_registry(caught_up)).decode()
    assert "fairshare_charging_lag_seconds 0.0" in text, "a quiet log is no lag"


def test_the_api_times_requests_by_route_template_and_serves_metrics_without_a_token() -> None:
    broker = InMemoryBroker()
    view = LiveView(InMemorySubscriber(broker, "api-view", VIEW_KINDS))
    client = TestClient(create_app(view, InMemoryPublisher(broker), default_tokens()))
    admin = {"Authorization": "Bearer admin-token"}

    def count(method: str, route: str, status: str) -> float:
        labels = {"method": method, "route": route, "status": status}
        return _sample("fairshare_api_request_duration_seconds_count", labels)

    known = count("GET", "/workloads/{workload_id}", "404")
    unmatched = count("GET", "unmatched", "404")
    odd = count("other", "unmatched", "404")
    assert client.get("/workloads/no-such-one", headers=admin).status_code == 404
    assert client.get("/no/such/path").status_code == 404
    client.request("BREW", "/no/such/path")
    assert count("GET", "/workloads/{workload_id}", "404") == known + 1
    assert count("GET", "unmatched", "404") == unmatched + 1
    assert count("other", "unmatched", "404") == odd + 1
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert "fairshare_api_request_duration_seconds_bucket" in answer.text
    assert "/no/such/path" not in answer.text
    assert "/metrics" not in client.get("/openapi.json").text


def test_restarts_come_from_the_supervisor_and_the_endpoint_serves_them() -> None:
    assert endpoint.restarts_from({endpoint.RESTARTS_ENV: "3"}) == 3
    assert endpoint.restarts_from({endpoint.RESTARTS_ENV: "three"}) == 0
    assert endpoint.restarts_from({}) == 0
    port = free_port()
    assert endpoint.serve_metrics(port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    assert "fairshare_service_restarts_total" in text
    assert "fairshare_consumer_lag_records" in text
    assert not endpoint.serve_metrics(port), "a port taken: logged, and the service runs on"
    assert endpoint.serve_metrics(0) is False


def test_records_not_believed_are_counted_by_reader_and_kind_and_shown_by_health() -> None:
    """A submission signed by a stranger under the API's key id: the API view refuses it, and
    says so in /metrics and /health."""
    from events.models import WorkloadSubmitted
    from tests.signing import KEYS, fact, registrations

    broker = InMemoryBroker()
    view = LiveView(InMemorySubscriber(broker, "api-view", VIEW_KINDS))
    client = TestClient(create_app(view, InMemoryPublisher(broker), default_tokens()))
    labels = {"consumer": "api", "kind": "bad-signature"}
    before = _sample("fairshare_records_not_believed_total", labels)
    submission = WorkloadSubmitted(
        workload_id="w-forged", budget="lab", pools=("p",), gpus=1, min_runtime_s=600,
        submitter="mallory",
    )  # fmt: skip
    forged = KEYS.stranger.sign(fact(submission, T0 + 30)).model_copy(
        update={"signer": KEYS.api.key_id}
    )
    for envelope in [*registrations(T0), forged]:
        view.state.apply(envelope)
    assert _sample("fairshare_records_not_believed_total", labels) == before + 1
    assert client.get("/health").json()["not_believed"] == {"bad-signature": 1}

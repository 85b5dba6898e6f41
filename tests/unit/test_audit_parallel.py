"""``fairshare audit replay --workers N``: the charge audit of an export split by workload
between processes gives the very result of the single-process replay (the reference), on
generated logs, clean or not: charges altered, missing, unsupported or duplicated, bad lines,
records not believed (forged, wrongly signed, about another cluster's node, whose node it is
told only by a heartbeat in another share); and where a split could judge otherwise (a line
routed otherwise by its bytes than by its record, an id re-stated in two shares) it says so and
gives the reference's result."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from events.envelope import Envelope
from events.fact_order import in_fact_order
from events.models import (
    EventData,
    GpuHeartbeat,
    LedgerCharge,
    NodeGpus,
    NodeRegistered,
    Placement,
    WorkloadArraySubmitted,
    WorkloadLost,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.ndjson import write_events
from events.serde import encode_structured
from events.signing import Signer
from projections.ledger import Ledger, charge_event_id
from services.audit.parallel import audit_share, merge, replay_file
from services.audit.replay import ReplayResult, replay
from services.audit.sources import EventFile
from services.audit.split import Splitter
from services.cli import app
from tests.signing import KEYS, fact, registration
from tests.unit.test_fact_order import _at, _heartbeat, _log, run_facts

Runs = tuple[list[tuple[EventData, float]], ...]
Log = list[Envelope[Any]]

runs_of_workloads = st.integers(2, 6).flatmap(
    lambda n: st.tuples(*(run_facts(i) for i in range(n)))
)
#: (run_facts draws its times with filters: with several runs, many draws are filtered out)
QUICKLY = [HealthCheck.too_slow, HealthCheck.filter_too_much]
#: How the recorded charges are tampered with: (what, which charge).
tamperings = st.lists(
    st.tuples(st.sampled_from(["alter", "drop", "invent", "duplicate"]), st.integers(0, 999)),
    max_size=3,
)
#: Bad lines: garbage, a record without its subject (both routed by decoding, in every share),
#: and (None) a record of the log made invalid where it lies (routed by its bytes to its share).
BAD_LINES = [
    b"not json at all",
    b'{"specversion":"1.0","type":"fairshare.node.heartbeat.v1"}',
    None,
]


def _shares(path: Path, shares: int, strict: bool = False) -> ReplayResult | str:
    """The split audit in this process, share after share (what the processes would do)."""
    return merge([audit_share(str(path), i, shares, strict, False) for i in range(shares)])


def _reference(path: Path, strict: bool = False) -> ReplayResult:
    return replay(EventFile(path, strict))


def _charges(log: Log, tampered: list[tuple[str, int]]) -> Log:
    """The charges the facts post, as charging records them, then tampered with, each
    inserted at a random place after the one before it (one ledger partition per workload
    keeps a workload's charges in order; an export interleaves the partitions anyhow)."""
    ledger = Ledger()
    for envelope in in_fact_order([e for e in log if not isinstance(e.data, LedgerCharge)]):
        ledger.apply(envelope.data, envelope.epoch_seconds)
    charges = list(ledger.entries)
    for what, which in tampered:
        if not charges:
            break
        at = which % len(charges)
        charge = charges[at]
        if what == "alter":
            more = charge.gpu_seconds + 1
            charges[at] = charge.model_copy(
                update={"gpu_seconds": more, "amount": more if charge.amount else 0}
            )
        elif what == "drop":
            del charges[at]
        elif what == "invent":
            later = charge.bucket_start + timedelta(hours=50)
            invented = f"{charge.charge_id.rsplit(':', 2)[0]}:{int(later.timestamp())}:0"
            charges.insert(
                at, charge.model_copy(update={"charge_id": invented, "bucket_start": later})
            )
        else:
            charges.insert(at, charge)
    return [fact(c, _at(0), event_id=charge_event_id(c)) for c in charges]


def _interleaved(facts: Log, charges: Log, rng: random.Random) -> Log:
    mixed = list(facts)
    rng.shuffle(mixed)
    at = 0
    for charge in charges:
        at = rng.randint(at, len(mixed))
        mixed.insert(at, charge)
        at += 1
    return mixed


def _write(path: Path, log: Log, bad_lines: list[tuple[int, bytes | None]] | None = None) -> Path:
    lines = [encode_structured(e) for e in log]
    for at, bad in bad_lines or []:
        if bad is None:
            at %= len(lines)
            lines[at] = lines[at].replace(b'"specversion":"1.0"', b'"specversion":"9.9"')
        else:
            lines.insert(at % (len(lines) + 1), bad)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _assert_same_as_reference(path: Path, shares: int, strict: bool = False) -> ReplayResult:
    reference = _reference(path, strict)
    split = _shares(path, shares, strict)
    assert not isinstance(split, str), f"fell back: {split}"
    assert split == reference
    return reference


@settings(max_examples=60, deadline=None, suppress_health_check=QUICKLY)
@given(
    runs=runs_of_workloads,
    tampered=tamperings,
    bad=st.lists(st.tuples(st.integers(0, 500), st.sampled_from(BAD_LINES)), max_size=3),
    shares=st.integers(2, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_split_audit_of_an_unsigned_log_is_the_single_process_audit(
    tmp_path_factory: pytest.TempPathFactory,
    runs: Runs,
    tampered: list[tuple[str, int]],
    bad: list[tuple[int, bytes | None]],
    shares: int,
    seed: int,
) -> None:
    rng = random.Random(seed)
    facts = _log(list(runs), [])
    log = _interleaved(facts, _charges(facts, tampered), rng)
    path = _write(tmp_path_factory.mktemp("log") / "log.ndjson", log, bad)
    reference = _assert_same_as_reference(path, shares)
    charged = bool(_charges(facts, []))
    assert reference.identical == (not (tampered and charged) and not bad)


# -- signed logs -------------------------------------------------------------------------

AGENT_C, AGENT_D = KEYS.agent_a, KEYS.agent_b


def _signed(facts: Log) -> Log:
    """``facts`` as their services sign them: submissions by the API, a run's facts and the
    heartbeats by cluster c's agent, a loss by the scheduler, charges by charging; every key
    registered before the first fact (cluster d's agent too), every role signing from then;
    a record signed already (a forgery) is left as it is."""
    first = min((e.time for e in facts), default=_at(0)) - timedelta(hours=1)
    keys = [
        registration(KEYS.admin, "admin", None, first),
        registration(KEYS.api, "api", None, first),
        registration(KEYS.scheduler, "scheduler", None, first),
        registration(KEYS.charging, "charging", None, first),
        registration(AGENT_C, "agent", "c", first),
        registration(AGENT_D, "agent", "d", first),
    ]
    return keys + [e if e.signer else _signer(e.data).sign(e) for e in facts]


def _signer(data: EventData) -> Signer:
    if isinstance(data, WorkloadSubmitted):
        return KEYS.api
    if isinstance(data, LedgerCharge):
        return KEYS.charging
    if isinstance(data, WorkloadLost):
        return KEYS.scheduler
    return AGENT_C


#: Records not to be believed, added to a signed log: each names a node (0 to 2) and a workload.
forgeries = st.lists(
    st.tuples(
        st.sampled_from(["start on another's node", "heartbeat of another cluster", "stranger"]),
        st.integers(0, 2),
        st.integers(0, 7),
        st.floats(0, 4 * 3600).map(lambda t: round(t, 3)),
    ),
    max_size=4,
)


def _forged(what: str, node: int, workload: int, t: float) -> Envelope[Any]:
    """A record of cluster d's agent (or of no registered key) about cluster c's node."""
    name, forged = f"node-{node}", f"forged-{workload}"
    if what == "heartbeat of another cluster":
        beat = GpuHeartbeat.model_validate(
            {**_heartbeat(name, f"wl-{workload}", 1, t).model_dump(), "cluster": "d"}
        )
        return fact(beat, _at(t), AGENT_D)
    start = WorkloadStarted(
        workload_id=forged,
        attempt=1,
        pool="p",
        placement=Placement(nodes=(NodeGpus(node=name, gpus=(0,)),)),
        allocated=True,
        budget="lab/b0",
    )
    return fact(start, _at(t), AGENT_D if what == "start on another's node" else KEYS.stranger)


@settings(max_examples=40, deadline=None, suppress_health_check=QUICKLY)
@given(
    runs=runs_of_workloads,
    tampered=tamperings,
    forged=forgeries,
    registered=st.sets(st.integers(0, 2)),
    bad_key=st.booleans(),
    shares=st.integers(2, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_split_audit_of_a_signed_log_judges_every_record_as_one_process_does(
    tmp_path_factory: pytest.TempPathFactory,
    runs: Runs,
    tampered: list[tuple[str, int]],
    forged: list[tuple[str, int, int, float]],
    registered: set[int],
    bad_key: bool,
    shares: int,
    seed: int,
) -> None:
    """Nodes whose registration is not in the log are told whose they are by their first
    believed heartbeat, wherever it lies: a forged record about such a node is refused in
    every share that meets it after that heartbeat, or believed in each before it. A key
    registered by an agent is refused before the first record, by every share, and named
    once."""
    rng = random.Random(seed)
    facts = _log(list(runs), [])
    facts += [_forged(*forgery) for forgery in forged]
    if bad_key:
        facts.append(registration(KEYS.stranger, "api", None, _at(0), by=AGENT_C))
    facts += [
        fact(NodeRegistered(node=f"node-{n}", cluster="c", pool="p", gpus=8, gpu_type="t"), _at(0))
        for n in sorted(registered)
    ]
    charges = _charges([e for e in facts if "forged" not in e.subject], tampered)
    log = _signed(_interleaved(facts, charges, rng))
    path = _write(tmp_path_factory.mktemp("log") / "log.ndjson", log)
    reference = _assert_same_as_reference(path, shares)
    assert reference.not_believed >= sum(what == "stranger" for what, *_ in forged)


def test_a_node_told_whose_in_another_share_refuses_a_forged_start_in_this_one(
    tmp_path: Path,
) -> None:
    """The case the witnesses are judged in every share for: node-0's only witness is a
    heartbeat of a workload of share 0; a start on node-0 by cluster d's agent, of a workload
    of share 1, later in the log, is refused by one process, and by the split one too."""
    splitter = Splitter(2)
    own = next(f"wl-{i}" for i in range(100) if splitter.share_of(f"wl-{i}".encode()) == 0)
    other = next(f"x-{i}" for i in range(100) if splitter.share_of(f"x-{i}".encode()) == 1)
    beat = fact(_heartbeat("node-0", own, 1, 10), _at(10), AGENT_C)
    start = WorkloadStarted(
        workload_id=other,
        attempt=1,
        pool="p",
        placement=Placement(nodes=(NodeGpus(node="node-0", gpus=(1,)),)),
        allocated=True,
        budget="lab/b0",
    )
    path = _write(tmp_path / "log.ndjson", [*_signed([]), beat, fact(start, _at(20), AGENT_D)])
    reference = _assert_same_as_reference(path, 2)
    assert reference.not_believed == 1
    assert "node node-0 is cluster c's" in reference.differences[0]


def test_a_record_not_believed_is_named_once_whichever_shares_its_copies_lie_in(
    tmp_path: Path,
) -> None:
    """A forged heartbeat stated twice under one id, naming runs of two shares (a heartbeat is
    not checked against re-statement: they are most of the log): one process names it once,
    at its first copy, and so does the split audit."""
    splitter = Splitter(2)
    own, other = (
        next(f"wl-{i}" for i in range(100) if splitter.share_of(f"wl-{i}".encode()) == share)
        for share in (1, 0)
    )
    same_id = "00000000-0000-4000-8000-000000000002"
    witness = fact(_heartbeat("node-0", own, 1, 5), _at(5), AGENT_C)
    forged = [
        fact(
            GpuHeartbeat.model_validate(
                {**_heartbeat("node-0", workload, 1, 9).model_dump(), "cluster": "d"}
            ),
            _at(9),
            AGENT_D,
            event_id=same_id,
        )
        for workload in (own, other)
    ]
    path = _write(tmp_path / "log.ndjson", [*_signed([]), witness, *forged])
    reference = _assert_same_as_reference(path, 2)
    assert reference.not_believed == 1
    assert "node node-0 is cluster c's" in reference.differences[0]


@pytest.mark.parametrize("shares", [2, 3])
def test_an_arrays_elements_are_charged_in_their_own_shares(tmp_path: Path, shares: int) -> None:
    """An array's one fact names the budget of workloads of every share (its starts do not):
    each share reads it, one counts it."""
    array = WorkloadArraySubmitted(
        array_id="arr", indices="0-7", budget="lab/b1", pools=("p",), gpus=1,
        min_runtime_s=600, submitter="u",
    )  # fmt: skip
    runs = [(array, 0.0)]
    for index in range(8):
        workload, node = f"arr_{index}", f"node-{index}"
        placement = Placement(nodes=(NodeGpus(node=node, gpus=(0,)),))
        started = WorkloadStarted(
            workload_id=workload, attempt=1, pool="p", placement=placement, allocated=True
        )
        runs += [(started, 10.0), (_heartbeat(node, workload, 1, 3700), 3700.0)]
    facts = _log([runs], [])
    path = _write(tmp_path / "log.ndjson", [*facts, *_charges(facts, [])])
    splitter = Splitter(shares)
    assert len({splitter.share_of(f"arr_{i}".encode()) for i in range(8)}) == shares
    reference = _assert_same_as_reference(path, shares)
    assert reference.identical
    assert reference.recorded_count == 8


def test_each_share_decodes_only_its_part_and_the_counts_add_up(tmp_path: Path) -> None:
    """Not vacuous: the shares split the records between them (each folds far fewer than
    all), and every record is counted once."""
    facts = _log(list(_fixed_runs()), [])
    path = _write(tmp_path / "log.ndjson", _interleaved(facts, [], random.Random(1)))
    outcomes = [audit_share(str(path), i, 2, False, False) for i in range(2)]
    counted = [o.folded.events for o in outcomes]
    assert sum(counted) == len(facts)
    assert all(0 < c < 0.8 * len(facts) for c in counted), counted


def _fixed_runs() -> Runs:
    return tuple(
        [
            (
                WorkloadSubmitted(
                    workload_id=f"wl-{i}",
                    budget="lab/b0",
                    pools=("p",),
                    gpus=1,
                    min_runtime_s=600,
                    submitter="u",
                ),
                float(i),
            ),
            (
                WorkloadStarted(
                    workload_id=f"wl-{i}",
                    attempt=1,
                    pool="p",
                    placement=Placement(nodes=(NodeGpus(node=f"node-{i % 3}", gpus=(0,)),)),
                    allocated=True,
                ),
                float(i + 10),
            ),
            (_heartbeat(f"node-{i % 3}", f"wl-{i}", 1, 4000.0 + i), 4000.0 + i),
        ]
        for i in range(40)
    )


# -- where the split cannot be sure: the reference's result, and why ------------------------


def test_a_charge_filed_under_another_workload_is_audited_in_one_process(
    tmp_path: Path,
) -> None:
    """A recorded charge whose id names one workload and whose workload field another: its
    bytes route it by the one, the record by the other. One process pairs it by id; the
    split audit says it cannot be sure, and gives the one process's result."""
    facts = _log(list(_fixed_runs()), [])
    ledger = Ledger()
    for envelope in in_fact_order(facts):
        ledger.apply(envelope.data, envelope.epoch_seconds)
    splitter = Splitter(2)
    charge = ledger.entries[0]
    elsewhere = next(
        e.subject
        for e in facts
        if splitter.share_of(e.subject.encode()) != splitter.share_of(charge.workload_id.encode())
        and isinstance(e.data, WorkloadSubmitted)
    )
    misfiled = charge.model_copy(update={"workload_id": elsewhere})
    recorded = [fact(c, _at(0), event_id=charge_event_id(c)) for c in ledger.entries[1:]]
    log = [*facts, fact(misfiled, _at(0), event_id=charge_event_id(misfiled)), *recorded]
    path = _write(tmp_path / "log.ndjson", log)
    split = replay_file(path, 2)
    assert split.fell_back is not None
    assert "routed otherwise" in split.fell_back
    assert split.result == _reference(path)
    assert not split.result.identical


def test_an_id_restated_with_other_content_in_two_shares_is_audited_in_one_process(
    tmp_path: Path,
) -> None:
    """Two signed records under one id, of workloads of two shares: one process refuses the
    later one (a replay with other content, spec 7.7); no share can see both."""
    splitter = Splitter(2)
    first, second = (
        next(f"wl-{i}" for i in range(100) if splitter.share_of(f"wl-{i}".encode()) == share)
        for share in (0, 1)
    )
    same_id = "00000000-0000-4000-8000-000000000001"
    submitted = [
        fact(
            WorkloadSubmitted(
                workload_id=w,
                budget="lab/b0",
                pools=("p",),
                gpus=1,
                min_runtime_s=60,
                submitter="u",
            ),
            _at(i),
            event_id=same_id,
        )
        for i, w in enumerate((first, second))
    ]
    path = _write(tmp_path / "log.ndjson", _signed(submitted))
    reference = _reference(path)
    assert reference.not_believed == 1
    assert "replayed" in reference.differences[0]
    split = replay_file(path, 2)
    assert split.fell_back is not None
    assert same_id in split.fell_back
    assert split.result == reference


# -- the processes, and the command --------------------------------------------------------


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_the_processes_give_the_reference_result(tmp_path: Path, start_method: str) -> None:
    facts = _log(list(_fixed_runs()), [])
    rng = random.Random(3)
    log = _interleaved(facts, _charges(facts, [("alter", 5), ("drop", 9)]), rng)
    path = _write(tmp_path / "log.ndjson", log, [(7, BAD_LINES[0])])
    split = replay_file(path, 3, start_method=start_method)
    assert split.fell_back is None
    assert split.result == _reference(path)
    assert len(split.result.bad_lines) == 1
    assert any(d.startswith("differs: ") for d in split.result.differences)
    assert any(d.startswith("missing in the log: ") for d in split.result.differences)


def test_audit_replay_with_workers_prints_what_one_process_prints(tmp_path: Path) -> None:
    facts = _log(list(_fixed_runs()), [])
    rng = random.Random(4)
    log = _interleaved(facts, _charges(facts, [("alter", 2)]), rng)
    path = _write(tmp_path / "log.ndjson", log, [(3, BAD_LINES[1])])
    runner = CliRunner()
    one = runner.invoke(app, ["audit", "replay", "--events", str(path)])
    two = runner.invoke(app, ["audit", "replay", "--events", str(path), "--workers", "2"])
    assert one.exit_code == two.exit_code == 1
    assert two.output == one.output
    refused = runner.invoke(app, ["audit", "replay", "--workers", "2", "--shuffle", "1"])
    assert refused.exit_code == 2
    assert "--workers" in refused.output


def test_the_route_read_from_a_line_is_the_route_of_its_record(tmp_path: Path) -> None:
    """The route read from a line's bytes is the route of its record, for every type our
    encoder writes in these logs (else every split audit would fall back)."""
    facts = _log(list(_fixed_runs()), [])
    log = _signed(facts)
    path = tmp_path / "log.ndjson"
    write_events(path, log)
    splitter = Splitter(3)
    for line, envelope in zip(path.read_bytes().splitlines(), log, strict=True):
        assert splitter.route_line(line) == splitter.route_of(envelope), orjson.loads(line)["type"]

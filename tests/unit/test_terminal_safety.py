"""Nothing the API says reaches the terminal as a control: every command of the client prints
hostile ids, budgets, reasons and spec strings escaped, and never as Rich markup or emoji.

The API is faked at the HTTP layer (``httpx.MockTransport``), so these answers are what a
compromised or older API, or old events in the log, could hold, whatever the API refuses today.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from services.api.models import (
    BudgetReport,
    BudgetView,
    MemberGrant,
    NodeList,
    NodeView,
    PendingInPool,
    PlainReason,
    PoolCapacity,
    PoolFigures,
    PoolQueueView,
    PreemptionRecord,
    QueueEntry,
    QueueView,
    WeightSet,
    WhyView,
    WorkloadList,
    WorkloadView,
)
from services.client import FairshareClient, register
from services.client.terminal import UNSAFE_CATEGORIES, clean, plain

#: An id as hostile as a terminal allows: a colour escape, NUL, BEL, Rich markup, a bidi
#: override, a C1 CSI, a lone surrogate, an emoji code, a newline and a zero-width space.
EVIL = "id\x1b[31m\x00\x07[bold]\u202e\x9b\ud800:thumbs_up:\nX\u200b"
SHOWN = "id\\x1b[31m\\x00\\x07[bold]\\u202e\\x9b\\ud800:thumbs_up:\\nX\\u200b"
#: The same as a command-line argument (a pasted id): no lone surrogate, which no argv holds
#: but for undecodable bytes (see the last test).
ARG = EVIL.replace("\ud800", "")
ARG_SHOWN = SHOWN.replace("\\ud800", "")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (EVIL, SHOWN),
        ("\x1b[31m", "\\x1b[31m"),
        ("a\x00b", "a\\x00b"),
        ("bell\x07", "bell\\x07"),
        ("del\x7f c1\x85", "del\\x7f c1\\x85"),
        ("tab\there\r\n", "tab\\there\\r\\n"),
        ("\u2066isolate\u2069 \u200fmark", "\\u2066isolate\\u2069 \\u200fmark"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("[bold]lab/vision[/] é 日本 ✓", "[bold]lab/vision[/] é 日本 ✓"),  # left to Text
    ],
)
def test_clean_escapes_controls_bidi_and_surrogates(text: str, shown: str) -> None:
    assert clean(text) == shown
    assert plain(text).plain == shown  # a Text: Rich never reads it as markup


def evil_workload(**changes: Any) -> WorkloadView:
    view = WorkloadView(
        workload_id=EVIL,
        budget=EVIL,
        submitter=EVIL,
        status=EVIL,
        pools=[EVIL],
        gpus=1,
        gang="single-node",
        min_runtime_s=0,
        allocated=False,
        resumable=True,
        priority=0,
        spec={"command": [EVIL], EVIL: {"cwd": EVIL}},
        attempt=1,
        pool=EVIL,
        placement=[],
        submitted_at=EVIL,
        placed_at=None,
        started_at=None,
        contract_ends_at=None,
        preempting=False,
        cancel_requested=False,
    )
    return view.model_copy(update=changes)


def evil_node() -> NodeView:
    return NodeView(
        node=EVIL,
        cluster=EVIL,
        pool=EVIL,
        gpu_type=EVIL,
        gpus=4,
        used_gpus=1,
        free_gpus=3,
        state=EVIL,
        cordoned=False,
        down=False,
        drained=False,
        workloads=[EVIL, EVIL],
        last_heartbeat=EVIL,
    )


def evil_queue() -> QueueView:
    entry = QueueEntry(
        position=1,
        workload_id=EVIL,
        budget=EVIL,
        submitter=EVIL,
        gpus=1,
        gang="single-node",
        min_runtime_s=60,
        allocated=True,
        priority=0,
        submitted_at=EVIL,
        budget_rank=1,
        usage_ratio=None,
        reasons=[PlainReason(code="no-share", message=EVIL)],
    )
    pool = PoolQueueView(
        pool=EVIL,
        capacity=4,
        free_gpus=0,
        largest_free_gpus=0,
        cordoned_nodes=[EVIL],
        queue_length=1,
        pending=[entry],
    )
    return QueueView(as_of=EVIL, window_s=3600, pools=[pool])


def evil_why() -> WhyView:
    pending = PendingInPool(
        pool=EVIL,
        position=1,
        queue_length=1,
        budget_rank=None,
        usage_ratio=None,
        reasons=[PlainReason(code="no-share", message=EVIL)],
    )
    preemption = PreemptionRecord(
        time=EVIL,
        command_id=EVIL,
        attempt=1,
        pool=EVIL,
        reason=EVIL,
        detail=EVIL,
        pass_id=1,
        input_position=[],
        budgets=[],
        preemptor=EVIL,
        preemptor_budget=EVIL,
        requeue=True,
        grace_period_s=0,
        message=EVIL,
    )
    return WhyView(
        workload_id=EVIL,
        status=EVIL,
        attempt=1,
        as_of=EVIL,
        pending=[pending],
        placements=[],
        preemptions=[preemption],
    )


def evil_budgets() -> BudgetReport:
    figures = PoolFigures(
        share=0.5,
        usage_gpu_s=3600,
        usage_ratio=1.0,
        rank=1,
        sibling_rank=1,
        owed_gpu_s=None,
        delivered_gpu_s=0,
        delivered_ratio=None,
        demand_gpus=0,
        entitled_gpus=None,
    )
    budget = BudgetView(
        budget=EVIL,
        parent=None,
        depth=0,
        leaf=True,
        closed=False,
        weight=1.0,
        pool_weights={},
        members={EVIL: [EVIL]},
        pools={EVIL: figures},
    )
    return BudgetReport(
        as_of=EVIL,
        window_s=3600,
        pools=[PoolCapacity(pool=EVIL, capacity=4)],
        owed=EVIL,
        budgets=[budget],
    )


Route = Callable[[httpx.Request], httpx.Response]


def answer(status: int, body: Any) -> Route:
    # ensure_ascii: a lone surrogate travels as the JSON escape \ud800, as a real API sends it
    content = json.dumps(body, ensure_ascii=True).encode()
    headers = {"content-type": "application/json"}
    return lambda request: httpx.Response(status, content=content, headers=headers)


def model(status: int, value: Any) -> Route:
    return answer(status, value.model_dump(mode="json"))


ANSWERS: dict[str, Route] = {
    "submit": model(201, evil_workload()),
    "cancel": model(200, evil_workload(status=EVIL)),
    "list": model(200, WorkloadList(total=1, workloads=[evil_workload()])),
    "queue": model(200, evil_queue()),
    "show": model(200, evil_workload()),
    "why": model(200, evil_why()),
    "share": model(200, evil_budgets()),
    "nodes": model(200, NodeList(nodes=[evil_node()])),
    "cordon": model(200, evil_node()),
    "uncordon": model(200, evil_node()),
    "set-weight": model(200, WeightSet(budget=EVIL, weight=2.0, pool=EVIL, event_id=EVIL)),
    "add-member": model(200, MemberGrant(budget=EVIL, user=EVIL, role=EVIL, changed=True)),
    "not-found": answer(404, {"detail": f"unknown workload {EVIL}"}),
    "invalid": answer(422, {"detail": [{"loc": ["body", EVIL], "msg": EVIL}]}),
}

#: Every command of the client, with hostile arguments where it takes any (a pasted id), and
#: the escaped form its output must show.
COMMANDS: dict[str, tuple[list[str], str]] = {
    "submit": (["submit", "-A", ARG, "-p", ARG, "--id", ARG, "--", ARG], SHOWN),
    "cancel": (["cancel", ARG, "--reason", ARG], SHOWN),
    "list": (["list"], SHOWN),
    "queue": (["queue"], SHOWN),
    "show": (["show", ARG], SHOWN),
    "why": (["why", ARG], SHOWN),
    "share": (["share"], SHOWN),
    "nodes": (["nodes"], SHOWN),
    "cordon": (["cordon", ARG, "--reason", ARG], SHOWN),
    "uncordon": (["uncordon", ARG], SHOWN),
    "set-weight": (["budgets", "set-weight", ARG, "2", "--pool", ARG], ARG_SHOWN),
    "add-member": (["budgets", "add-member", ARG, ARG, "--role", ARG], ARG_SHOWN),
    "not-found": (["show", ARG], SHOWN),
    "invalid": (["submit", "-A", "lab/a", "-p", "p"], SHOWN),
}


def run(case: str, *extra: str) -> tuple[int, str, str]:
    def client(api: str, token: str | None) -> FairshareClient:
        http = httpx.Client(transport=httpx.MockTransport(ANSWERS[case]))
        return FairshareClient(api, token, http=http)

    app = typer.Typer()
    register(app, client)
    result = CliRunner().invoke(
        app, [*COMMANDS[case][0], *extra], env={"FAIRSHARE_TOKEN": "t", "COLUMNS": "3000"}
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` that act on a terminal (the console's own newlines aside)."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in UNSAFE_CATEGORIES]


@pytest.mark.parametrize("case", sorted(set(COMMANDS) - {"not-found", "invalid"}))
def test_every_command_prints_hostile_answers_escaped(case: str) -> None:
    code, out, err = run(case)
    assert code == 0, err
    assert unsafe(out) == []
    assert COMMANDS[case][1] in out  # escaped; "[bold]" and ":thumbs_up:" as text, not markup
    assert "\nX" not in out  # the id's newline did not start a line of its own


@pytest.mark.parametrize("case", ["not-found", "invalid"])
def test_error_details_are_printed_escaped(case: str) -> None:
    code, _, err = run(case)
    assert code == 1
    assert unsafe(err) == []
    assert SHOWN in err
    assert "error: " in err


@pytest.mark.parametrize("case", ["list", "why", "show"])
def test_json_output_escapes_every_control(case: str) -> None:
    """``--json`` is the exact form: every non-ASCII character a JSON escape, so even a pipe to
    a terminal shows no control."""
    code, out, err = run(case, "--json")
    assert code == 0, err
    assert out.isascii()
    assert unsafe(out) == []
    assert "\\u001b[31m" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "bad\udcff"], "'bad\\udcff' is not UTF-8 text"),
        (["budgets", "set-weight", "lab/\udcff", "2"], "is not UTF-8 text"),
        (["submit", "-A", "lab/\udcff", "-p", "p"], "cannot send '\\udcff': not UTF-8 text"),
        (["list", "--user", "\udcff"], "not UTF-8 text"),
    ],
)
def test_an_argument_of_undecodable_bytes_is_an_error_not_a_traceback(
    args: list[str], message: str
) -> None:
    """The shell hands Python bytes that are not UTF-8 as lone surrogates (``$'\\xff'``)."""
    app = typer.Typer()
    register(app, lambda api, token: FairshareClient(api, token, http=httpx.Client()))
    result = CliRunner().invoke(app, args, env={"FAIRSHARE_TOKEN": "t"})
    assert not isinstance(result.exception, UnicodeError), result.exception
    assert result.exit_code == 1
    assert message in result.stderr
    assert unsafe(result.stderr) == []


def test_an_api_url_with_a_control_character_is_an_error_not_a_traceback() -> None:
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["nodes", "--api", "http://127.0.0.1:9/\x1b[2J"])
    assert result.exit_code == 1, result.exception
    assert "cannot reach the API" in result.stderr
    assert unsafe(result.stderr) == []

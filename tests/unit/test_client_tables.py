"""The client's tables on an 80-column terminal: ids and budget paths are printed whole (a
reader pastes them into the next command), the less useful columns fold or go, and a caption
names the ones that went. Against the API's TestClient, like tests/unit/test_client.py, over a
world of demo-length ids."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
import typer
from rich.console import Console

from events.models import (
    BudgetCreated,
    MembershipGranted,
    NodeCordoned,
    NodeGpus,
    NodeRegistered,
    Placement,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadStarted,
)
from services.client import FairshareClient, register
from services.client.terminal import FittedTable
from tests.factories import submitted
from tests.unit.test_api import NOW, World
from tests.unit.test_client import runner

RUNNING = "demo-20261201-abcdef-000123"
PENDING = "demo-20261201-abcdef-000124"
DONE = "demo-20261201-abcdef-000125"
BUDGET = "lab/robotics/perception"
POOL = "a100-east"
NODES = ("gpu-node-0017", "gpu-node-0018")
USER = "ana"


def demo_world() -> World:
    """lab/robotics/perception (ana) in pool a100-east: RUNNING holds half of gpu-node-0017,
    PENDING waits for a whole node, DONE ran and succeeded; gpu-node-0018 is cordoned."""
    w = World()
    t = NOW - timedelta(hours=3)
    for budget in ("lab", "lab/robotics", BUDGET):
        w.fact(BudgetCreated(budget=budget, created_by="admin"), t)
    w.fact(MembershipGranted(budget=BUDGET, user=USER, role="member", granted_by="admin"), t)
    for node in NODES:
        w.fact(NodeRegistered(node=node, cluster="c", pool=POOL, gpus=8, gpu_type="A100"), t)
    w.fact(NodeCordoned(node=NODES[1], cordoned_by="admin", reason="firmware update"), t)
    for workload_id, gpus, ran in ((DONE, (0, 1, 2, 3), 2), (RUNNING, (0, 1, 2, 3), 1)):
        placement = Placement(nodes=(NodeGpus(node=NODES[0], gpus=gpus),))
        start = NOW - timedelta(hours=ran)
        w.fact(submitted(workload_id, budget=BUDGET, pools=(POOL,), gpus=4, submitter=USER), start)
        w.fact(
            WorkloadPlaced(
                workload_id=workload_id,
                attempt=1,
                pool=POOL,
                placement=placement,
                allocated=True,
                command_id=f"place:{workload_id}:1",
            ),
            start,
        )
        w.fact(
            WorkloadStarted(
                workload_id=workload_id, attempt=1, pool=POOL, placement=placement, allocated=True
            ),
            start,
        )
        if workload_id == DONE:
            w.fact(
                WorkloadFinished(workload_id=DONE, attempt=1, outcome="succeeded", exit_code=0),
                start + timedelta(minutes=30),
            )
    w.fact(
        submitted(PENDING, budget=BUDGET, pools=(POOL,), gpus=8, submitter=USER),
        NOW - timedelta(minutes=5),
    )
    assert not w.view.state.rejected, w.view.state.rejected
    return w


def shown(*args: str, columns: int = 80) -> str:
    """What the command prints on a terminal ``columns`` wide (admin: every budget's work)."""
    world = demo_world()
    app = typer.Typer()
    register(app, lambda api, token: FairshareClient(api, token, http=world.client))
    result = runner.invoke(
        app, [*args], env={"FAIRSHARE_TOKEN": "admin-token", "COLUMNS": str(columns)}
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    return result.stdout


#: Each table, and the ids and paths it must print whole.
WHOLE = {
    "queue": (["queue"], [PENDING, BUDGET, POOL, USER]),
    "queue -l": (["queue", "--long"], [PENDING, BUDGET, POOL, USER]),
    "list": (["list"], [RUNNING, PENDING, BUDGET, USER]),
    "history": (["history"], [DONE, BUDGET, USER]),
    "share": (["share"], ["robotics", "perception", POOL]),  # a tree: each level its name
    "nodes": (["nodes"], [*NODES, POOL]),
    "nodes -R": (["nodes", "-R"], [NODES[1], "admin"]),
    "show": (["show", RUNNING], [RUNNING, BUDGET, POOL]),
}


@pytest.mark.parametrize("case", sorted(WHOLE))
def test_ids_and_paths_are_whole_at_80_columns_and_the_table_fits(case: str) -> None:
    args, whole = WHOLE[case]
    out = shown(*args)
    for text in whole:
        assert text in out, f"{text} cut or folded:\n{out}"
    assert "…" not in out
    too_wide = [line for line in out.splitlines() if len(line) > 80]
    assert too_wide == [], out


@pytest.mark.parametrize(
    ("args", "gone"),
    [
        (["list"], "SUBMITTED"),
        (["history"], "BURST GPU-h"),
        (["share"], "DELIVERED GPU-h"),
    ],
)
def test_a_narrow_terminal_drops_the_least_useful_columns_and_says_so(
    args: list[str], gone: str
) -> None:
    narrow, wide = shown(*args), shown(*args, columns=250)
    table, caption = " ".join(narrow.split()).split("not shown at this width: ")
    assert gone not in table
    assert gone in caption
    assert caption.endswith("(--json has them)")
    assert gone in wide
    assert "not shown" not in wide


def test_the_queue_keeps_its_reason_at_80_columns() -> None:
    out = shown("queue")
    [line] = [line for line in out.splitlines() if PENDING in line]
    assert line.split()[-1] == "ranks-ahead", "the reason it waits, after the ids"


def render(table: FittedTable, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, record=True, soft_wrap=True)
    console.print(table)
    return console.export_text().splitlines()


def test_ids_stay_whole_even_when_they_alone_are_wider_than_the_terminal() -> None:
    """The last resort: a line the terminal wraps, rather than an id cut short."""
    table = FittedTable("ID", "PATH", "NOTE", whole=("ID", "PATH"), drop=("NOTE",))
    table.add_row((RUNNING, BUDGET, "a note of several words"))
    lines = render(table, 40)
    assert lines[1].split() == [RUNNING, BUDGET]
    assert "NOTE" not in lines[0]


def test_no_word_is_cut_when_even_the_least_widths_overflow_the_terminal() -> None:
    """With nothing left to drop and the columns' longest words wider than the terminal,
    Rich's own layout folded a reason a letter a line ("unallocate/d", "array-limi/t") and
    cut ids with an ellipsis. Now each column gets its longest word and the terminal wraps
    the line."""
    table = FittedTable("ID", "PATH", "REASON", "WHY", "STATUS", whole=("ID", "PATH"))
    table.add_row((RUNNING, BUDGET, "unallocated", "array-limit reached", "preempted"))
    lines = render(table, 50)
    words = {word for line in lines for word in line.split()}
    for word in (RUNNING, BUDGET, "unallocated", "array-limit", "preempted", "REASON", "STATUS"):
        assert word in words, (word, lines)
    assert not [line for line in lines if "\u2026" in line], "nothing cut short"


def test_a_short_column_stays_whole_while_a_longer_one_wraps() -> None:
    """Rich alone narrows the widest columns first, down to equal widths, and would fold
    ``succeeded`` here to make room for a header that can wrap."""
    table = FittedTable("ID", "STATUS", "CHARGED GPU-h", whole=("ID",))
    table.add_row((DONE, "succeeded", "0.00"))
    lines = render(table, 46)
    assert lines[1].split() == ["ID", "STATUS", "GPU-h"]
    assert lines[2].split() == [DONE, "succeeded", "0.00"]


def test_a_list_in_a_cell_is_one_id_a_line() -> None:
    table = FittedTable("NODE", "WORKLOADS", "REASON", whole=("NODE", "WORKLOADS"))
    table.add_row((NODES[0], [RUNNING, PENDING], "a reason in words"))
    lines = render(table, 50)
    assert lines[1].split()[:2] == [NODES[0], RUNNING]
    assert lines[2].split()[0] == PENDING


def test_columns_that_may_go_go_in_the_order_given_and_only_as_needed() -> None:
    table = FittedTable("ID", "B", "C", "D", whole=("ID",), drop=("D", "B"))
    table.add_row((RUNNING, "bbbbbbbbbb", "cccccccccc", "dddddddddd"))
    assert render(table, 80)[0].split() == ["ID", "B", "C", "D"]
    assert render(table, 55)[0].split() == ["ID", "B", "C"]
    assert render(table, 45)[0].split() == ["ID", "C"]


def test_a_column_named_that_the_table_lacks_is_an_error() -> None:
    with pytest.raises(ValueError, match="not columns"):
        FittedTable("ID", whole=("WORKLOAD",))
    table = FittedTable("ID", "B")
    with pytest.raises(ValueError, match="1 cells for 2 columns"):
        table.add_row(("x",))


def test_the_title_and_the_caption_wrap_to_the_terminal() -> None:
    """The consoles soft-wrap: a title or caption left to Rich would run on past the edge."""
    table = FittedTable("ID", "NOTE", whole=("ID",), drop=("NOTE",), title="window " * 12)
    table.add_row((RUNNING, "a note"))
    lines = render(table, 30)
    assert max(len(line) for line in lines) <= 30
    assert "(--json has them)" in " ".join(" ".join(lines).split())

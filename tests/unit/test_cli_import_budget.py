"""``fairshare`` stays snappy: a client command (``list``, ``queue``, ``why`` ...) imports the
HTTP client, Typer and Rich, and nothing of the services behind the API (SQLAlchemy, FastAPI,
Kafka clients, the projections, the events' models), which cost a client command a second
before each command's module was loaded only when it runs (:mod:`services.cli`).

What a command imports is checked in a fresh interpreter, so the modules this test session has
imported already do not hide anything. The check is the list of modules, which is
deterministic; the import time is printed (``pytest -s``), with only a very generous bound."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
import typer
from typer.testing import CliRunner

from services import cli
from services.cli import COMMANDS, app

ROOT = Path(__file__).resolve().parents[2]

#: Third-party packages of the servers, the read models, the simulator and the benchmarks.
SERVER_PACKAGES = frozenset(
    {
        "alembic",
        "confluent_kafka",
        "fastapi",
        "faust",
        "matplotlib",
        "numpy",
        "pandas",
        "psycopg",
        "pyarrow",
        "sqlalchemy",
        "starlette",
        "uvicorn",
    }
)
#: Our modules a client command may import: the CLI, the client, and the logging setup of the
#: root options. Anything else of ``services`` (the API's app, the scheduler core, the read
#: models, the reports...), and ``events`` and ``projections``, is server side.
#: services.runtime.when: relative times (`--since 2d`), standard library only.
CLIENT_SIDE = ("services.cli", "services.client", "services.runtime.logs", "services.runtime.when")
OUR_PACKAGES = ("services", "events", "projections")

#: Runs the command in argv[1:] through ``services.cli.app``, ``{api}`` in it being the
#: ``url`` that the code before it set, then prints what the command printed and every module
#: imported.
INVOKE = """
import json, sys
from typer.testing import CliRunner
import services.cli
args = [arg.replace("{api}", url) for arg in sys.argv[1:]]
result = CliRunner().invoke(services.cli.app, args, env={"FAIRSHARE_TOKEN": "t"})
print(json.dumps({"exit_code": result.exit_code, "output": result.output,
                  "modules": sorted(sys.modules)}))
"""

#: The API's address is a port that refuses connections (bound, never listening: no other
#: process can take it meanwhile).
REFUSED = """
import socket
held = socket.socket()
held.bind(("127.0.0.1", 0))
url = "http://127.0.0.1:%d" % held.getsockname()[1]
"""


def run_isolated(
    *args: str, api: str = REFUSED, stdin: str = "", importtime: bool = False
) -> tuple[dict[str, Any], str]:
    """The command's exit code, output and imported modules, from a fresh interpreter whose
    API is what ``api`` sets up (reading ``stdin``); and its ``-X importtime`` report when
    asked."""
    flags = ["-X", "importtime"] if importtime else []
    done = subprocess.run(
        [sys.executable, *flags, "-c", api + INVOKE, *args],
        input=stdin,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done.stderr


def server_side(modules: list[str]) -> list[str]:
    """The modules a client command has no business importing."""
    return [
        name
        for name in modules
        if name.split(".")[0] in SERVER_PACKAGES
        or (
            name.split(".")[0] in OUR_PACKAGES
            and name != "services"
            and name != "services.runtime"  # the package of services.runtime.logs (empty)
            and not any(name == m or name.startswith(f"{m}.") for m in CLIENT_SIDE)
        )
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["list", "--api", "{api}"],
        ["queue", "--me", "--api", "{api}"],
        ["why", "job-1", "-v", "--api", "{api}"],
        ["history", "--api", "{api}"],
        ["share", "--api", "{api}"],
        ["nodes", "-R", "--api", "{api}"],
        ["submit", "-A", "lab/a", "-p", "p", "--api", "{api}", "--", "true"],
        ["budgets", "create", "lab/x", "--api", "{api}"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_client_command_imports_nothing_of_the_servers(args: list[str]) -> None:
    answer, _ = run_isolated(*args)
    assert answer["exit_code"] == 1, answer["output"]
    assert "cannot reach the API" in answer["output"]
    assert server_side(answer["modules"]) == []
    # pydantic (0.1 s here) only checks an answer, and a refused call has none. Typer 0.29
    # built a pydantic TypeAdapter for every parameter of every command (0.14 s a command):
    # pinned below it in pyproject.toml
    assert "pydantic" not in answer["modules"]
    # the standard library's http.client sends it: httpx and what it brings took 0.1 s
    assert not {"httpx", "httpcore", "h11", "anyio"} & set(answer["modules"])


#: The API's address is a server that answers every GET with what it read on stdin.
ANSWERING = """
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
body = sys.stdin.read().encode()
class Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = "http://127.0.0.1:%d" % server.server_address[1]
"""


def test_a_command_that_reads_an_answer_loads_only_the_models_of_that_answer() -> None:
    """Checking an answer with the API's models must not build the API around them: its
    package, the tokens' budget tree, every event (``lazy_loader`` and ``defer_build``; they
    cost every command 0.4 s)."""
    from services.api.models import WorkloadList

    one = {
        "workload_id": "w-1", "budget": "lab/a", "submitter": "ana", "status": "pending",
        "pools": ["p"], "gpus": 1, "gang": "single-node", "min_runtime_s": 60,
        "allocated": True, "resumable": True, "priority": 0,
        "spec": {"duration_s": 60, "command": ["true"]}, "attempt": 1, "pool": None,
        "placement": [], "submitted_at": "2026-12-03T11:54:20Z", "placed_at": None,
        "started_at": None, "contract_ends_at": None, "preempting": False,
        "cancel_requested": False, "name": None, "preemptions": 0, "ended_at": None,
        "exit_code": None, "end_message": "", "elapsed_s": None, "contract_left_s": None,
        "charged_gpu_s": 0, "burst_gpu_s": 0, "archived": False,
    }  # fmt: skip
    body = WorkloadList.model_validate({"total": 1, "workloads": [one]}).model_dump_json()
    answer, _ = run_isolated("list", "--api", "{api}", api=ANSWERING, stdin=body)
    assert answer["exit_code"] == 0, answer["output"]
    assert "w-1" in answer["output"]
    modules = set(answer["modules"])
    assert "services.api.models" in modules  # the answer was checked with the API's model
    assert not modules & {"services.api.auth", "projections.budget_tree", "events.envelope"}
    assert not modules & {"events.models.ledger", "events.models.heartbeats"}
    assert not modules & {"httpx", "httpcore", "h11", "anyio"}


@pytest.mark.parametrize("args", [["list", "--help"], ["budgets", "create", "--help"]])
def test_a_client_commands_help_does_not_even_load_the_http_client(args: list[str]) -> None:
    answer, _ = run_isolated(*args)
    assert answer["exit_code"] == 0, answer["output"]
    assert server_side(answer["modules"]) == []
    assert "httpx" not in answer["modules"]
    assert "services.client.api" not in answer["modules"]


def cumulative_import_s(report: str) -> float:
    """The total of ``-X importtime``'s top-level imports, in seconds."""
    total = 0
    for line in report.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        if not name.startswith("  "):  # one space before a top-level import, more when nested
            total += int(cumulative)
    return total / 1e6


def test_a_client_commands_import_time_is_reported() -> None:
    """Printed for a person (``pytest -s``); the bound only catches a gross regression (the
    command imported 1.0-1.4 s of modules before its module was loaded lazily), since a busy
    machine can double the figure."""
    answer, report = run_isolated("list", "--api", "{api}", importtime=True)
    assert answer["exit_code"] == 1, answer["output"]
    seconds = cumulative_import_s(report)
    print(f"`fairshare list` imported {len(answer['modules'])} modules in {seconds:.3f} s")
    assert 0 < seconds < 2.0


def test_every_command_of_every_cli_module_is_listed_where_it_is() -> None:
    """:data:`services.cli.COMMANDS` names each command's module: a command a module adds
    without an entry there would not exist, and an entry without a command would fail."""
    one_name_each = {source: name for name, source in COMMANDS.items()}
    for source, name in one_name_each.items():
        found = set(cli.load(name, source))
        expected = {other for other, where in COMMANDS.items() if where == source}
        assert found == expected, source


def test_the_help_lists_every_command_in_order() -> None:
    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    assert group.list_commands(ctx) == list(COMMANDS)
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = [re.match(r"│ ([a-z]\S*)", line) for line in result.output.splitlines()]
    assert [row[1] for row in rows if row] == list(COMMANDS)


def test_an_unknown_command_is_refused_with_suggestions() -> None:
    result = CliRunner().invoke(app, ["qeue"])
    assert result.exit_code == 2
    assert "No such command 'qeue'" in result.output
    assert "'queue'" in result.output


def test_the_clients_statuses_are_the_apis() -> None:
    from services.api.models import WORKLOAD_STATUSES, WorkloadStatus
    from services.client.api import DEFAULT_API
    from services.client.constants import DEFAULT_API as CONSTANT
    from services.client.constants import WorkloadStatus as ClientStatus

    assert get_args(ClientStatus) == get_args(WorkloadStatus) == WORKLOAD_STATUSES
    assert DEFAULT_API == CONSTANT


#: What a module that registers commands may import when it is imported (``fairshare --help``
#: imports them all): besides the standard library, Typer, Rich and a few light modules of
#: ours; the rest belongs inside the commands.
LIGHT_THIRD_PARTY = frozenset({"typer", "rich"})
LIGHT_OURS = frozenset(
    {
        "services.runtime.cli_options",
        "services.audit.decisions_cli",
        "services.client.commands",
        "services.client.commands.common",
        "services.client.constants",
        "services.client.terminal",
    }
)


def top_level_imports(path: Path) -> list[str]:
    """The modules ``path`` imports when it is imported (not those inside functions or under
    ``if TYPE_CHECKING:``)."""
    names: list[str] = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


CLI_MODULES = sorted(
    {source[0] for source in COMMANDS.values()}
    | {
        f"services.client.commands.{p.stem}"
        for p in (ROOT / "services/client/commands").glob("*.py")
    }
    - {"services.client.commands.__init__"}
)


@pytest.mark.parametrize("module", CLI_MODULES)
def test_a_cli_module_imports_only_light_modules(module: str) -> None:
    path = ROOT / module.replace(".", "/")
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    heavy = [
        name
        for name in top_level_imports(path)
        if name != "__future__"
        and name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] not in LIGHT_THIRD_PARTY
        and name not in LIGHT_OURS
        and not name.startswith("services.client.commands.")
    ]
    assert heavy == [], f"{module} imports {heavy} at the top: import them in the commands"

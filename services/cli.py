"""The ``fairshare`` command line, assembled from the commands each package registers.

Typer gives typed options, ``--help`` and shell completion for free; Rich renders the tables.
Each package owns its commands in its own ``cli`` module, as a Typer app: a sub-app becomes a
group (``fairshare bench ...``), and an app of top-level commands has them merged in here. This
module only assembles them, in the order ``fairshare --help`` lists them, and adds the root
options (logging).

A command's module is imported when that command runs (or ``fairshare --help`` lists it), not
when ``fairshare`` starts: ``fairshare queue`` loads the API client, never the services' Kafka,
SQLAlchemy or FastAPI, which would cost it a second. :data:`COMMANDS` says where each command
is defined; ``tests/unit/test_cli_import_budget.py`` keeps it complete and checks what a client
command imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer._click import Command, Context

#: Where a command is defined: its module, the Typer app there, and whether that app is the
#: group of the command's name (``fairshare NAME ...``) rather than holding the command itself
#: (merged at the top level of ``fairshare``).
Source = tuple[str, str, bool]
_GROUP, _MERGED = True, False
_CLIENT: Source = ("services.client.commands", "client_app", _MERGED)

#: Every command of ``fairshare``, in the order ``fairshare --help`` lists them.
COMMANDS: dict[str, Source] = {
    "up": ("services.launcher.cli", "up_app", _MERGED),
    "simulate": ("services.simulator.cli", "simulate_app", _MERGED),
    "charging": ("services.charging.cli", "charging_app", _MERGED),
    "projector": ("services.projector.cli", "projector_app", _MERGED),
    "scheduler": ("services.scheduler.cli", "scheduler_app", _MERGED),
    "submit": _CLIENT,
    "cancel": _CLIENT,
    "list": _CLIENT,
    "queue": _CLIENT,
    "history": _CLIENT,
    "show": _CLIENT,
    "why": _CLIENT,
    "share": _CLIENT,
    "statement": _CLIENT,
    "nodes": _CLIENT,
    "cordon": _CLIENT,
    "uncordon": _CLIENT,
    "schemas": ("services.schemas.cli", "schemas_app", _GROUP),
    "broker": ("services.launcher.cli", "broker_app", _GROUP),
    "bench": ("services.bench.cli", "bench_app", _GROUP),
    "audit": ("services.audit.cli", "audit_app", _GROUP),
    "events": ("services.audit.cli", "events_app", _GROUP),
    "api": ("services.api.cli", "api_app", _GROUP),
    "tokens": ("services.api.cli", "tokens_app", _GROUP),
    "keys": ("services.launcher.keys_cli", "keys_app", _GROUP),
    "report": ("services.reports.cli", "report_app", _GROUP),
    "agent": ("services.agents.cli", "agent_app", _GROUP),
    "budgets": _CLIENT,
    "prices": _CLIENT,
}


def load(name: str, source: Source) -> dict[str, Command]:
    """The commands that ``source`` adds to ``fairshare``, by name: its app as the group
    ``name``, or the app's commands (and groups) merged, exactly as ``add_typer`` makes them."""
    module, attr, group = source
    commands = getattr(importlib.import_module(module), attr)
    holder = typer.Typer()
    holder.add_typer(commands, name=name if group else None)
    return dict(typer.main.get_group(holder).commands)


class _LazyCommands(MutableMapping[str, "Command"]):
    """The root's commands by name, each source imported on the first use of one of its
    commands; listing the names imports nothing."""

    def __init__(self) -> None:
        self._loaded: dict[str, Command] = {}
        self._added: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name in self._added:
            return self._added[name]
        if name not in self._loaded and name in COMMANDS:
            self._loaded.update(load(name, COMMANDS[name]))
        return self._loaded[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._added[name] = command

    def __delitem__(self, name: str) -> None:
        del self._added[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._added if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + len(self._added.keys() - COMMANDS.keys())


class _LazyGroup(TyperGroup):
    """``fairshare`` itself: a Typer group whose commands are loaded on first use."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        commands = _LazyCommands()
        commands.update(self.commands)  # any registered on ``app`` itself
        self.commands = commands

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)


app = typer.Typer(
    cls=_LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    help="Fairshare: GPU time by budgets, hierarchical fair share, every fact an event on Kafka.",
)


@app.callback()
def _root(
    log_level: Annotated[str, typer.Option(envvar="FAIRSHARE_LOG_LEVEL")] = "WARNING",
    log_json: Annotated[bool, typer.Option("--log-json", help="JSON log lines")] = False,
) -> None:
    from services.runtime.logs import configure_logging

    configure_logging(log_level, json=log_json)


def main() -> None:
    app()


if __name__ == "__main__":
    main()

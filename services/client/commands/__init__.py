"""Typer commands of the API client, Slurm-familiar where it helps.

``submit`` (sbatch), ``cancel`` (scancel), ``queue`` (squeue), ``list``, ``history`` (sacct),
``show``, ``why``, ``share`` (sshare), ``nodes`` (sinfo), ``cordon``/``uncordon`` (scontrol
update state=drain), ``budgets create|close|set-weight|add-member|revoke-member`` (sacctmgr),
``budgets bind-namespace|unbind-namespace|namespaces`` (which Kubernetes namespaces may charge
which budgets), ``budgets bind-account|unbind-account|accounts`` (which Slurm accounts charge
which budgets),
``prices set|list``, ``statement`` (a budget's money in a month).
Every read command takes ``--json`` to print the API's JSON as it came. HTTP errors print the
status and the API's detail and exit 1.

The commands are plain functions (:mod:`.workloads`, :mod:`.queue`, :mod:`.history`,
:mod:`.budgets`, :mod:`.money`, :mod:`.nodes`, :mod:`.prices`);
:data:`client_app` holds them at its top level, so ``app.add_typer(client_app)`` (no name)
merges them into another Typer app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from services.client.commands import budgets, history, money, nodes, prices, queue, workloads
from services.client.commands.common import ClientFactory, ClientSource, parse_duration

__all__ = ["ClientFactory", "client_app", "client_commands", "parse_duration", "register"]

#: Top-level commands, in the order ``--help`` lists them.
COMMANDS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("submit", workloads.submit),
    ("cancel", workloads.cancel),
    ("list", workloads.list_workloads),
    ("queue", queue.queue),
    ("history", history.history),
    ("show", workloads.show),
    ("why", queue.why),
    ("share", budgets.share),
    ("statement", money.statement),
    ("nodes", nodes.nodes),
    ("cordon", nodes.cordon),
    ("uncordon", nodes.uncordon),
)
BUDGET_COMMANDS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("list", budgets.list_budgets),
    ("members", budgets.members),
    ("create", budgets.create),
    ("close", budgets.close),
    ("set-weight", budgets.set_weight),
    ("add-member", budgets.add_member),
    ("revoke-member", budgets.revoke_member),
    ("bind-namespace", budgets.bind_namespace),
    ("unbind-namespace", budgets.unbind_namespace),
    ("namespaces", budgets.namespaces),
    ("bind-account", budgets.bind_account),
    ("unbind-account", budgets.unbind_account),
    ("accounts", budgets.accounts),
)
PRICE_COMMANDS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("set", prices.set_price),
    ("list", prices.list_prices),
)


def _add_commands(app: typer.Typer, client_factory: ClientFactory | None) -> None:
    settings: dict[str, Any] = {}
    if client_factory is not None:
        settings["obj"] = ClientSource(client_factory)
    for name, command in COMMANDS:
        app.command(name, context_settings=settings)(command)
    budgets_app = typer.Typer(no_args_is_help=True, help="Manage budgets (managers, admins).")
    for name, command in BUDGET_COMMANDS:
        budgets_app.command(name, context_settings=settings)(command)
    app.add_typer(budgets_app, name="budgets")
    prices_app = typer.Typer(
        no_args_is_help=True, help="Prices of a GPU-hour (admins set them, anyone reads them)."
    )
    for name, command in PRICE_COMMANDS:
        prices_app.command(name, context_settings=settings)(command)
    app.add_typer(prices_app, name="prices")


def client_commands(client_factory: ClientFactory | None = None) -> typer.Typer:
    """A Typer app of the client's commands (no name, no callback, so it can be merged),
    making clients with ``client_factory`` (default: :class:`FairshareClient`)."""
    app = typer.Typer(no_args_is_help=True, help="The Fairshare API's command-line client.")
    _add_commands(app, client_factory)
    return app


#: The client's commands with the default client, for ``app.add_typer(client_app)``.
client_app = client_commands()


def register(app: typer.Typer, client_factory: ClientFactory | None = None) -> None:
    """Add the client's commands, and the ``budgets`` and ``prices`` sub-apps, to ``app``
    itself (kept for callers written before :data:`client_app`)."""
    _add_commands(app, client_factory)

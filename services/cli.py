"""The ``fairshare`` command line, assembled from the commands each package registers.

Typer gives typed options, ``--help`` and shell completion for free; Rich renders the tables.
Each package owns its commands in its own ``cli`` module, as a Typer app: a sub-app becomes a
group (``fairshare bench ...``), and an app of top-level commands has them merged in here. This
module only assembles them, in the order ``fairshare --help`` lists them, and adds the root
options (logging).
"""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
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


def _merge(commands: typer.Typer) -> None:
    """Put an app's commands (and its groups) at the top level of ``fairshare``, in place.
    ``add_typer`` without a name would merge them too, but listed after every named group,
    which would reorder ``fairshare --help``."""
    app.registered_commands.extend(commands.registered_commands)
    app.registered_groups.extend(commands.registered_groups)


def _register_services() -> None:
    from services.agents.cli import agent_app
    from services.api.cli import api_app, tokens_app
    from services.audit.cli import audit_app, events_app
    from services.bench.cli import bench_app
    from services.charging.cli import charging_app
    from services.client.commands import client_app
    from services.launcher.cli import broker_app, up_app
    from services.projector.cli import projector_app
    from services.reports.cli import report_app
    from services.scheduler.cli import scheduler_app
    from services.schemas.cli import schemas_app
    from services.simulator.cli import simulate_app

    for commands in (up_app, simulate_app, charging_app, projector_app, scheduler_app):
        _merge(commands)
    app.add_typer(schemas_app, name="schemas")
    app.add_typer(broker_app, name="broker")
    app.add_typer(bench_app, name="bench")
    app.add_typer(audit_app, name="audit")
    app.add_typer(events_app, name="events")
    app.add_typer(api_app, name="api")
    app.add_typer(tokens_app, name="tokens")
    app.add_typer(report_app, name="report")
    app.add_typer(agent_app, name="agent")
    _merge(client_app)


_register_services()


def main() -> None:
    app()


if __name__ == "__main__":
    main()

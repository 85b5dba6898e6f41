"""``fairshare schemas generate | check``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from services.runtime.cli_options import console, err_console

schemas_app = typer.Typer(no_args_is_help=True, help="JSON Schemas of every event.")


@schemas_app.command("generate")
def schemas_generate(
    directory: Annotated[Path | None, typer.Option("--dir")] = None,
) -> None:
    """Write schemas/*.json from the event models."""
    from events.schema_export import DEFAULT_SCHEMA_DIR, write_schemas

    target = directory or DEFAULT_SCHEMA_DIR
    names = write_schemas(target)
    console.print(f"wrote {len(names)} schema files to {target}")


@schemas_app.command("check")
def schemas_check(
    directory: Annotated[Path | None, typer.Option("--dir")] = None,
) -> None:
    """Fail if the checked-in schemas differ from the models."""
    from events.schema_export import DEFAULT_SCHEMA_DIR, schema_drift

    target = directory or DEFAULT_SCHEMA_DIR
    problems = schema_drift(target)
    for problem in problems:
        err_console.print(f"[red]schema drift:[/] {problem}")
    if problems:
        err_console.print("regenerate with: fairshare schemas generate")
        raise typer.Exit(1)
    console.print(f"schemas up to date in {target}")

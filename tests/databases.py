"""A fresh, migrated database of either backend for one test (PostgreSQL: a database of its own,
dropped afterwards), so that contract tests run the same cases on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from services.read_models.migrate import migrate


@contextmanager
def fresh_database(database_url: str) -> Iterator[Engine]:
    if database_url.startswith("sqlite"):
        engine = create_engine(database_url)
        try:
            migrate(engine)
            yield engine
        finally:
            engine.dispose()
        return
    name = f"fs_{uuid.uuid4().hex[:12]}"
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(make_url(database_url).set(database=name))
    try:
        migrate(engine)
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}"'))
        admin.dispose()

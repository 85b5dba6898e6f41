"""Both database backends are reachable over real connections and honour transactions.

The read models of later issues run their contract tests through the same ``database_url``
fixture; this checks the fixture and the CI set-up themselves.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, func, select

pytestmark = [pytest.mark.database]


def test_committed_rows_survive_and_rolled_back_rows_do_not(database_url: str) -> None:
    metadata = MetaData()
    table = Table(
        f"smoke_{uuid.uuid4().hex[:8]}",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("name", String(50), nullable=False, unique=True),
    )
    engine = create_engine(database_url)
    try:
        metadata.create_all(engine)
        with engine.begin() as connection:
            connection.execute(table.insert(), [{"name": "kept"}])
        connection = engine.connect()
        transaction = connection.begin()
        connection.execute(table.insert(), [{"name": "discarded"}])
        connection.close()  # the process "dies" before commit: the transaction is rolled back
        assert not transaction.is_active
        with engine.connect() as connection:
            names = connection.execute(select(table.c.name)).scalars().all()
            count = connection.execute(select(func.count()).select_from(table)).scalar_one()
        assert names == ["kept"]
        assert count == 1
    finally:
        metadata.drop_all(engine)
        engine.dispose()

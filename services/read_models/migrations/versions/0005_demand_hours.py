"""Each leaf's demand as seconds per level per hour, so that a window's owed costs its hours.

* ``demand_hours``: per pool, leaf budget and hour, how long its allocated work wanted how
  many GPUs (``projections.demand_hours``);
* ``demand_levels``: per pool and leaf, the level from its latest demand change on (what the
  histograms do not hold yet).

The projector keeps both with ``demand_intervals``, in the same transaction; here they are
built from the intervals already projected (``services.read_models.demand_upkeep.backfill``),
which is what the projector would have written. Delivered per hour was already kept
(``hourly_usage``).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from services.read_models.demand_upkeep import backfill

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "demand_hours",
        sa.Column("pool", sa.String(128), primary_key=True),
        sa.Column("budget", sa.String(512), primary_key=True),
        sa.Column("hour", sa.BigInteger, primary_key=True),
        sa.Column("level", sa.BigInteger, primary_key=True),
        sa.Column("seconds", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "demand_levels",
        sa.Column("pool", sa.String(128), primary_key=True),
        sa.Column("budget", sa.String(512), primary_key=True),
        sa.Column("level", sa.BigInteger, nullable=False),
        sa.Column("since", sa.BigInteger, nullable=False),
    )
    backfill(op.get_bind(), _plain_insert)


def _plain_insert(_connection: Any, table: Any) -> Any:
    return sa.insert(table)

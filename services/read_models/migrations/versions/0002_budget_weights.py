"""Weight history of the budgets, so that reports price the past with the shares then in force.

Existing budgets get their current weights as history from their creation (all an older
database knows); rebuild the read models from the log for the exact history.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    history = op.create_table(
        "budget_weights",
        sa.Column("event_id", sa.String(64), primary_key=True),
        sa.Column("pool", sa.String(128), primary_key=True),
        sa.Column("budget", sa.String(512), nullable=False, index=True),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("effective_at", sa.BigInteger, nullable=False),
    )
    budgets = sa.table(
        "budgets",
        sa.column("budget", sa.String),
        sa.column("weight", sa.Float),
        sa.column("pool_weights", sa.JSON),
        sa.column("created_at", sa.BigInteger),
    )
    rows = []
    for row in op.get_bind().execute(sa.select(budgets)):
        event_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"fairshare:backfill|{row.budget}"))
        weights = {"": row.weight, **dict(row.pool_weights or {})}
        rows += [
            {
                "event_id": event_id,
                "pool": pool,
                "budget": row.budget,
                "weight": weight,
                "effective_at": row.created_at,
            }
            for pool, weight in weights.items()
        ]
    if rows:
        op.bulk_insert(history, rows)


def downgrade() -> None:
    op.drop_table("budget_weights")

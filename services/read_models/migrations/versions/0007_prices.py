"""Prices of a GPU-hour (``fairshare.price.set.v1``), so that cost reports price the past with
the prices then in force.

An older database has no prices: the projector writes them from the log from here on (prices
set before this migration appear once the read models are rebuilt from the log).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prices",
        sa.Column("pool", sa.String(128), primary_key=True),
        sa.Column("budget", sa.String(512), primary_key=True),
        sa.Column("effective_at", sa.BigInteger, primary_key=True),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("per_gpu_hour", sa.String(32), nullable=False),
        sa.Column("set_by", sa.String(256), nullable=False),
        sa.Column("reason", sa.String(2000), nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("event_time", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("prices")

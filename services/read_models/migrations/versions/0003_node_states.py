"""State history of the nodes, so that the utilisation report integrates capacity and outages
over time.

Existing nodes are taken as registered since the epoch, in their current state from their
last change (all an older database knows); rebuild the read models from the log for the exact
history.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    history = op.create_table(
        "node_states",
        sa.Column("event_id", sa.String(64), primary_key=True),
        sa.Column("node", sa.String(256), nullable=False, index=True),
        sa.Column("pool", sa.String(128), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("effective_at", sa.BigInteger, nullable=False),
    )
    nodes = sa.table(
        "nodes",
        sa.column("node", sa.String),
        sa.column("pool", sa.String),
        sa.column("gpus", sa.Integer),
        sa.column("state", sa.String),
        sa.column("changed_at", sa.BigInteger),
    )
    rows = []
    for row in op.get_bind().execute(sa.select(nodes)):
        states = [("up", 0)] + ([(row.state, row.changed_at)] if row.state != "up" else [])
        for state, at in states:
            key = f"fairshare:backfill-node|{row.node}|{state}"
            rows.append(
                {
                    "event_id": str(uuid.uuid5(uuid.NAMESPACE_URL, key)),
                    "node": row.node,
                    "pool": row.pool,
                    "gpus": row.gpus,
                    "state": state,
                    "effective_at": at,
                }
            )
    if rows:
        op.bulk_insert(history, rows)


def downgrade() -> None:
    op.drop_table("node_states")

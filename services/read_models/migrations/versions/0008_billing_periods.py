"""What billing needs to place a charge in its period, and a run's lost work:

- ``ledger_entries.ledger_partition`` / ``ledger_offset``: where the charge lies on the ledger,
  so that a month bills the charges its sealed period holds (``projections.periods.hour_held``);
- ``closed_periods``: the seals (``fairshare.ledger.period_closed.v1``) with their cut;
- ``workload_checkpoints``: how often a workload says it checkpoints (its spec), for the work
  a preemption throws away (``projections.costs.lost_gpu_s``).

Rows projected before this migration have none of these: their charges count as lying before
every cut (billed with their hour's month), seals appear once the read models are rebuilt from
the log, and their workloads count as never checkpointing.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("ledger_partition", sa.Integer))
        batch.add_column(sa.Column("ledger_offset", sa.BigInteger))
    op.create_table(
        "workload_checkpoints",
        sa.Column("workload_id", sa.String(256), primary_key=True),
        sa.Column("checkpoint_every_s", sa.Integer, nullable=False),
    )
    op.create_table(
        "closed_periods",
        sa.Column("period", sa.String(32), primary_key=True),
        sa.Column("start", sa.BigInteger, nullable=False),
        sa.Column("end", sa.BigInteger, nullable=False, index=True),
        sa.Column("as_of", sa.JSON, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("event_time", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("closed_periods")
    op.drop_table("workload_checkpoints")
    with op.batch_alter_table("ledger_entries") as batch:
        batch.drop_column("ledger_offset")
        batch.drop_column("ledger_partition")

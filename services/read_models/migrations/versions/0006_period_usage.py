"""What the ledger charged per report period, so that a report reads its periods, not every
entry of its range.

* ``period_usage``: per period (hour, day, week, month), pool, leaf budget, submitter and line,
  GPU-seconds charged allocated and free and the workloads with entries there
  (``projections.bucket_usage``);
* an index on ``decision_records (kind, event_time)``: a report reads the preemptions of its
  range, not every decision in it.

The projector keeps ``period_usage`` with ``ledger_entries``, in the same transaction; here it
is built from the entries already projected (``services.read_models.usage_upkeep.rebuild``),
which is what the projector would have written.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from services.read_models.usage_upkeep import rebuild

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "period_usage",
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("period_start", sa.BigInteger, primary_key=True),
        sa.Column("pool", sa.String(128), primary_key=True),
        sa.Column("budget", sa.String(512), primary_key=True),
        sa.Column("submitter", sa.String(256), primary_key=True),
        sa.Column("correction", sa.Boolean, primary_key=True),
        sa.Column("allocated_gpu_s", sa.BigInteger, nullable=False),
        sa.Column("unallocated_gpu_s", sa.BigInteger, nullable=False),
        sa.Column("workloads", sa.BigInteger, nullable=False),
    )
    op.create_index(
        "ix_decision_records_kind_event_time", "decision_records", ["kind", "event_time"]
    )
    rebuild(op.get_bind(), _plain_insert)


def _plain_insert(_connection: Any, table: Any) -> Any:
    return sa.insert(table)


def downgrade() -> None:
    op.drop_index("ix_decision_records_kind_event_time", table_name="decision_records")
    op.drop_table("period_usage")

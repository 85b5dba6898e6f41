"""Job arrays: which array a workload is an element of, and the facts read before their array.

- ``workloads.array_id`` / ``array_index`` (indexed by array): ``GET /arrays`` and
  ``/workloads?array=`` for elements the API's view has forgotten, and a new array may not take
  a forgotten one's id;
- ``early_facts``: an element's facts read before its array's fact (they lie on other
  partitions), held until the array is projected.

Workloads projected before this migration are of no array (there were none).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("array_id", sa.String(256)))
        batch.add_column(sa.Column("array_index", sa.Integer))
        batch.create_index("ix_workloads_array_id", ["array_id"])
    op.create_table(
        "early_facts",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("workload_id", sa.String(256), nullable=False, index=True),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("event_type", sa.String(200), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("event_time", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("early_facts")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_index("ix_workloads_array_id")
        batch.drop_column("array_index")
        batch.drop_column("array_id")

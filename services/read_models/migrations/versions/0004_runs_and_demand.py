"""What the delivered and owed figures need, readable by the window alone.

* ``ledger_entries.attempt``: which run a charge is for, instead of parsing it out of the
  charge id on every read;
* ``runs``: every run of every workload, where its charges reach, and whether they reach its
  end (``settled``): delivered up to an instant is the charges plus what unsettled runs used
  since their charges stop;
* ``workloads.pool`` and ``workloads.cancel_requested``: what the demand rule needs to know
  (the pool work holds GPUs in; whether a stopped run will be requeued);
* ``demand_intervals``: from when to when each workload wanted how many GPUs in which pool.

Existing charges get their attempt from their ids; runs and demand cannot be recovered from
the old tables: rebuild the read models from the log for them.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from events.models.ledger import parse_charge_id

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer, nullable=True))
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("pool", sa.String(128), nullable=True))
        batch.add_column(
            sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false())
        )
    entries = sa.table(
        "ledger_entries", sa.column("charge_id", sa.String), sa.column("attempt", sa.Integer)
    )
    bind = op.get_bind()
    for (charge_id,) in bind.execute(sa.select(entries.c.charge_id)).all():
        parsed = parse_charge_id(str(charge_id))
        if parsed is not None:
            bind.execute(
                entries.update().where(entries.c.charge_id == charge_id).values(attempt=parsed[1])
            )
    # The horizon (the latest event time) is a max over these: an index each, so reading it
    # does not scan the history.
    for table, column in (
        ("ledger_entries", "event_time"),
        ("workloads", "submitted_at"),
        ("workloads", "started_at"),
        ("workloads", "ended_at"),
        ("node_states", "effective_at"),
        ("decision_records", "event_time"),
    ):
        op.create_index(f"ix_{table}_{column}", table, [column])
    op.create_table(
        "runs",
        sa.Column("workload_id", sa.String(256), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("pool", sa.String(128), nullable=False),
        sa.Column("budget", sa.String(512), nullable=False),
        sa.Column("allocated", sa.Boolean, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("started_at", sa.BigInteger, nullable=False),
        sa.Column("ended_at", sa.BigInteger),
        sa.Column("charged_until", sa.BigInteger),
        sa.Column("settled", sa.Boolean, nullable=False, index=True),
    )
    op.create_table(
        "demand_intervals",
        sa.Column("workload_id", sa.String(256), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("pool", sa.String(128), nullable=False),
        sa.Column("budget", sa.String(512), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("start_at", sa.BigInteger, nullable=False, index=True),
        sa.Column("end_at", sa.BigInteger, index=True),
    )

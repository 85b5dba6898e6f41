"""The first read models: positions, ledger, hourly usage, workloads, nodes, budgets,
decision records.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "projector_positions",
        sa.Column("projector", sa.String(200), primary_key=True),
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "ledger_entries",
        sa.Column("charge_id", sa.String(300), primary_key=True),
        sa.Column("workload_id", sa.String(256), nullable=False, index=True),
        sa.Column("budget", sa.String(512), nullable=False, index=True),
        sa.Column("pool", sa.String(128), nullable=False),
        sa.Column("bucket_start", sa.BigInteger, nullable=False, index=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("debit_account", sa.String(600), nullable=False),
        sa.Column("credit_account", sa.String(600), nullable=False),
        sa.Column("gpu_seconds", sa.BigInteger, nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("corrects", sa.String(300)),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("event_time", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "hourly_usage",
        sa.Column("pool", sa.String(128), primary_key=True),
        sa.Column("budget", sa.String(512), primary_key=True),
        sa.Column("bucket_start", sa.BigInteger, primary_key=True),
        sa.Column("allocated_gpu_s", sa.BigInteger, nullable=False),
        sa.Column("unallocated_gpu_s", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "workloads",
        sa.Column("workload_id", sa.String(256), primary_key=True),
        sa.Column("budget", sa.String(512), nullable=False, index=True),
        sa.Column("pools", sa.JSON, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("gang", sa.String(16), nullable=False),
        sa.Column("min_runtime_s", sa.Integer, nullable=False),
        sa.Column("resumable", sa.Boolean, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("submitter", sa.String(256), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("submitted_at", sa.BigInteger, nullable=False),
        sa.Column("started_at", sa.BigInteger),
        sa.Column("ended_at", sa.BigInteger),
        sa.Column("preemptions", sa.Integer, nullable=False),
    )
    op.create_table(
        "nodes",
        sa.Column("node", sa.String(256), primary_key=True),
        sa.Column("cluster", sa.String(256), nullable=False),
        sa.Column("pool", sa.String(128), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("gpu_type", sa.String(256), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("changed_at", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "budgets",
        sa.Column("budget", sa.String(512), primary_key=True),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("pool_weights", sa.JSON, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("closed_at", sa.BigInteger),
    )
    op.create_table(
        "decision_records",
        sa.Column("command_id", sa.String(300), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("workload_id", sa.String(256), nullable=False, index=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("pass_id", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("preemptor", sa.String(256)),
        sa.Column("record", sa.JSON, nullable=False),
        sa.Column("event_time", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "decision_records",
        "budgets",
        "nodes",
        "workloads",
        "hourly_usage",
        "ledger_entries",
        "projector_positions",
    ):
        op.drop_table(table)

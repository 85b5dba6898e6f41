"""The read models' tables. Times are integer epoch seconds (UTC): exact, portable across
SQLite and PostgreSQL, and byte-identical in reports regenerated later."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
)

metadata = MetaData()

projector_positions = Table(
    "projector_positions",
    metadata,
    Column("projector", String(200), primary_key=True),
    Column("topic", String(255), primary_key=True),
    Column("partition", Integer, primary_key=True),
    #: The next offset to apply: everything before it is in the tables.
    Column("next_offset", BigInteger, nullable=False),
)

ledger_entries = Table(
    "ledger_entries",
    metadata,
    Column("charge_id", String(300), primary_key=True),
    Column("workload_id", String(256), nullable=False, index=True),
    Column("budget", String(512), nullable=False, index=True),
    Column("pool", String(128), nullable=False),
    Column("bucket_start", BigInteger, nullable=False, index=True),
    Column("kind", String(16), nullable=False),
    Column("debit_account", String(600), nullable=False),
    Column("credit_account", String(600), nullable=False),
    Column("gpu_seconds", BigInteger, nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("corrects", String(300)),
    Column("event_id", String(36), nullable=False),
    Column("event_time", BigInteger, nullable=False),
)

hourly_usage = Table(
    "hourly_usage",
    metadata,
    Column("pool", String(128), primary_key=True),
    Column("budget", String(512), primary_key=True),
    Column("bucket_start", BigInteger, primary_key=True),
    Column("allocated_gpu_s", BigInteger, nullable=False),
    Column("unallocated_gpu_s", BigInteger, nullable=False),
)

workloads = Table(
    "workloads",
    metadata,
    Column("workload_id", String(256), primary_key=True),
    Column("budget", String(512), nullable=False, index=True),
    Column("pools", JSON, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("gang", String(16), nullable=False),
    Column("min_runtime_s", Integer, nullable=False),
    Column("resumable", Boolean, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("submitter", String(256), nullable=False),
    Column("status", String(16), nullable=False, index=True),
    Column("attempt", Integer, nullable=False),
    Column("submitted_at", BigInteger, nullable=False),
    Column("started_at", BigInteger),
    Column("ended_at", BigInteger),
    Column("preemptions", Integer, nullable=False),
)

nodes = Table(
    "nodes",
    metadata,
    Column("node", String(256), primary_key=True),
    Column("cluster", String(256), nullable=False),
    Column("pool", String(128), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("gpu_type", String(256), nullable=False),
    Column("state", String(16), nullable=False),
    Column("changed_at", BigInteger, nullable=False),
)

budgets = Table(
    "budgets",
    metadata,
    Column("budget", String(512), primary_key=True),
    Column("weight", Float, nullable=False),
    Column("pool_weights", JSON, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("closed_at", BigInteger),
)

#: Every state a node has been in, from its event time on ("up", "cordoned", "drained",
#: "down"), with its pool and GPUs then: the utilisation report integrates capacity and
#: outages over time instead of assuming today's nodes were always there.
node_states = Table(
    "node_states",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("node", String(256), nullable=False, index=True),
    Column("pool", String(128), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("effective_at", BigInteger, nullable=False),
)

#: Every weight a budget has had, from its event time on (``pool`` "" is the weight in every
#: pool without an override): reports price a past period with the shares then in force.
budget_weights = Table(
    "budget_weights",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("pool", String(128), primary_key=True),
    Column("budget", String(512), nullable=False, index=True),
    Column("weight", Float, nullable=False),
    Column("effective_at", BigInteger, nullable=False),
)

decision_records = Table(
    "decision_records",
    metadata,
    Column("command_id", String(300), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("workload_id", String(256), nullable=False, index=True),
    Column("attempt", Integer, nullable=False),
    Column("pass_id", BigInteger, nullable=False),
    Column("reason", String(32), nullable=False),
    Column("preemptor", String(256)),
    Column("record", JSON, nullable=False),
    Column("event_time", BigInteger, nullable=False),
)

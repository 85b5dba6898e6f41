"""The read models' tables. Times are integer epoch seconds (UTC): exact, portable across
SQLite and PostgreSQL, and byte-identical in reports regenerated later."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    false,
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
    Column("event_time", BigInteger, nullable=False, index=True),
    #: The run charged (None only on rows a migration could not attribute).
    Column("attempt", Integer),
    #: Where the charge lies on the ledger (None on rows projected before migration 0008):
    #: a billing period holds the charges before its seal's cut.
    Column("ledger_partition", Integer),
    Column("ledger_offset", BigInteger),
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
    Column("submitted_at", BigInteger, nullable=False, index=True),
    Column("started_at", BigInteger, index=True),
    Column("ended_at", BigInteger, index=True),
    Column("preemptions", Integer, nullable=False),
    #: The pool the current attempt holds GPUs in (None while it waits).
    Column("pool", String(128)),
    #: Its submitter asked to cancel it while it ran: a stop ends it instead of a requeue.
    Column("cancel_requested", Boolean, nullable=False, server_default=false()),
    #: The job array it is an element of, and its index there (None: of no array).
    Column("array_id", String(256), index=True),
    Column("array_index", Integer),
)

#: Facts of a workload read before the workload itself: an array element's facts lie on its
#: own partition, its submission (the array's) on the array's, and a projector reads
#: partitions in no order between them. Applied, in the order read, once the array is.
#: Each job array's fact as the log states it: what ``GET /arrays/{id}`` answers once the API's
#: view has forgotten every element (their rows above carry the rest: statuses, ends).
job_arrays = Table(
    "job_arrays",
    metadata,
    Column("array_id", String(256), primary_key=True),
    Column("budget", String(512), nullable=False, index=True),
    Column("submitted_at", BigInteger, nullable=False),
    #: ``fairshare.workload_array.submitted.v1``'s data
    Column("data", JSON, nullable=False),
)

early_facts = Table(
    "early_facts",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("workload_id", String(256), nullable=False, index=True),
    Column("event_id", String(64), nullable=False),
    Column("event_type", String(200), nullable=False),
    Column("data", JSON, nullable=False),
    Column("event_time", BigInteger, nullable=False),
)

#: Every run (workload, attempt): where it ran, when, and where its charges reach. A run is
#: ``settled`` once its charges reach its end; the unsettled ones are the few that running
#: work's not-yet-charged use is read from (:class:`projections.figures.OpenRun`).
runs = Table(
    "runs",
    metadata,
    Column("workload_id", String(256), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("pool", String(128), nullable=False),
    Column("budget", String(512), nullable=False),
    Column("allocated", Boolean, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("ended_at", BigInteger),
    #: The end of its latest hour charged (None: nothing charged yet).
    Column("charged_until", BigInteger),
    Column("settled", Boolean, nullable=False, index=True),
)

#: From when to when a workload wanted how many GPUs in a pool (:func:`projections.figures.
#: wanted_gpus`); ``end_at`` None while it still does. A window reads the intervals that
#: overlap it, never the whole history.
demand_intervals = Table(
    "demand_intervals",
    metadata,
    Column("workload_id", String(256), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("pool", String(128), nullable=False),
    Column("budget", String(512), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("start_at", BigInteger, nullable=False, index=True),
    Column("end_at", BigInteger, index=True),
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
    Column("effective_at", BigInteger, nullable=False, index=True),
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
    Column("event_time", BigInteger, nullable=False, index=True),
    #: A report reads the preemptions of its range, not every decision in it.
    Index("ix_decision_records_kind_event_time", "kind", "event_time"),
)

#: Per pool, leaf budget and hour: how many seconds its allocated work wanted how many GPUs
#: (:mod:`projections.demand_hours`), up to ``demand_levels.since``. Kept by the projector in
#: the transaction that changes ``demand_intervals``, so that a window's owed costs its hours
#: (a histogram each) and not every demand change in it.
demand_hours = Table(
    "demand_hours",
    metadata,
    Column("pool", String(128), primary_key=True),
    Column("budget", String(512), primary_key=True),
    Column("hour", BigInteger, primary_key=True),
    Column("level", BigInteger, primary_key=True),
    Column("seconds", BigInteger, nullable=False),
)

#: Per pool and leaf budget: the GPUs its allocated work wants from ``since`` on (the latest
#: demand change): the part of the level history ``demand_hours`` does not hold yet.
demand_levels = Table(
    "demand_levels",
    metadata,
    Column("pool", String(128), primary_key=True),
    Column("budget", String(512), primary_key=True),
    Column("level", BigInteger, nullable=False),
    Column("since", BigInteger, nullable=False),
)

#: Per report bucket (``kind``: hour, day, week, month; ``period_start``: the bucket's start),
#: pool, leaf budget, submitter and line (``correction``): GPU-seconds the ledger charged
#: allocated and free, and how many workloads have entries there
#: (:mod:`projections.bucket_usage`). Kept by the projector in the transaction that inserts the
#: entries, so that a report reads buckets x budgets x pools rows, not every entry of its range.
#: (Named before a report's bucket had a name of its own; not a billing period.)
period_usage = Table(
    "period_usage",
    metadata,
    Column("kind", String(8), primary_key=True),
    Column("period_start", BigInteger, primary_key=True),
    Column("pool", String(128), primary_key=True),
    Column("budget", String(512), primary_key=True),
    Column("submitter", String(256), primary_key=True),
    Column("correction", Boolean, primary_key=True),
    Column("allocated_gpu_s", BigInteger, nullable=False),
    Column("unallocated_gpu_s", BigInteger, nullable=False),
    Column("workloads", BigInteger, nullable=False),
)

#: Every price of a GPU-hour (``PriceSet``), by pool, subtree (``budget`` "" for the pool's list
#: price) and the hour it takes effect. The amount is the exact decimal text of the fact, never a
#: float. The first price written for a key stays, as in the price book (the API refuses a
#: second one; only a raced or forged fact could bring one).
prices = Table(
    "prices",
    metadata,
    Column("pool", String(128), primary_key=True),
    Column("budget", String(512), primary_key=True),
    Column("effective_at", BigInteger, primary_key=True),
    Column("currency", String(3), nullable=False),
    Column("per_gpu_hour", String(32), nullable=False),
    Column("set_by", String(256), nullable=False),
    Column("reason", String(2000), nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("event_time", BigInteger, nullable=False),
)

#: The ledger's sealed periods (``fairshare.ledger.period_closed.v1``) and their cut: the first
#: ledger offset after it, per partition (``as_of``: ``[{"partition": p, "offset": o}, ...]``).
closed_periods = Table(
    "closed_periods",
    metadata,
    Column("period", String(32), primary_key=True),
    Column("start", BigInteger, nullable=False),
    Column("end", BigInteger, nullable=False, index=True),
    Column("as_of", JSON, nullable=False),
    Column("digest", String(64), nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("event_time", BigInteger, nullable=False),
)

#: How often a workload says it checkpoints (its spec's ``checkpoint_every_s``), for the work a
#: preemption throws away (``projections.costs.lost_gpu_s``); a workload that does not say has
#: no row.
workload_checkpoints = Table(
    "workload_checkpoints",
    metadata,
    Column("workload_id", String(256), primary_key=True),
    Column("checkpoint_every_s", Integer, nullable=False),
)

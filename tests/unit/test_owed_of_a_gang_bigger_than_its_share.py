"""What a tenant whose every job is bigger than its share is owed, and that it gets it.

Owed is ``min(entitled, wanted)`` moment by moment (projections/owed.py): a tenant entitled to
1 GPU that always wants an 8-GPU gang is owed 1 GPU x every hour it waits or runs, 168 GPU-hours
a week, although no single moment can give it 1 GPU. It is delivered in whole gangs: its gang's
turn (scheduling/gang_turn.py) lets it take a node about once every 8 entitled hours, so over a
week it gets about what it was owed. A run past the week's end is charged to the next week,
so a single week may fall short by up to one run; the check is on whole weeks after the first
(the window starts empty). Without the gang's turn the same tenant got 66.7% in its third
week, and without the starving catch-up as well, nothing after the first.
"""

from __future__ import annotations

from scheduling.scheduling_pass import run_pass
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.metrics import compute_metrics
from services.simulator.trace import TraceJob

T0 = 1_505_001_600.0  # weeks count from the first arrival
HOUR = 3600.0
WEEKS = 3


def _trace() -> list[TraceJob]:
    """32 GPUs; ``big`` (31/32 of the weight) keeps them busy with a deep backlog of 1-GPU runs
    of 1 to 4 h, staggered, so that GPUs come free one at a time and are taken at once (a whole
    node is never free by itself); ``small`` (1/32: 1 GPU) has an 8-GPU run of 2 h waiting at
    every moment."""
    jobs: list[TraceJob] = []
    end = T0 + WEEKS * 7 * 24 * HOUR
    n = 0
    at = T0
    while at < end:
        # 64 GPUs' worth of 1-GPU work arriving every 2.5 h: twice what the cluster can run
        jobs += [
            TraceJob(f"big-{n}-{k}", at + k * 137.0, HOUR * (1 + (n * 7 + k * 13) % 4), 1, "big")
            for k in range(64)
        ]
        at += 2.5 * HOUR
        n += 1
    jobs += [
        TraceJob(f"small-{i}", T0 + i * 2 * HOUR, 2 * HOUR, 8, "small")
        for i in range(int(WEEKS * 7 * 12))
    ]
    jobs.append(TraceJob("end", end, 60, 1, "big"))
    return sorted(jobs, key=lambda job: (job.arrival, job.job_id))


def test_a_tenant_whose_every_gang_exceeds_its_share_gets_what_it_is_owed_each_week() -> None:
    config = SimulationConfig(gpus=32, gpus_per_node=8)
    outcome = Simulation(_trace(), {"big": 31.0, "small": 1.0}, config, run_pass).run()
    small = compute_metrics(outcome)["budgets"]["small"]
    weeks = [w for w in small["weekly"] if w["week"] >= 1 and w["owed_gpu_hours"] > 100]
    assert len(weeks) >= 1
    for week in weeks:
        # owed: 1 GPU for every hour of the week it wanted its gang, about 168 GPU-hours
        assert 150 <= week["owed_gpu_hours"] <= 169, week
        assert week["owed_delivered"] >= 0.9, week

"""Fair share with one of its rules switched off, run beside the full policy.

Each rule of the policy was added for a regime it was measured on; a rule that helped on one
trace can cost on another (rules tuned on the synthetic big-gang scenario made a real trace
worse). ``fairshare simulate --ablate RULE,...`` replays the same trace, in the same run, with
the full policy and with each named rule off (policy ``fairshare-no-RULE``), so that every
rule's effect is one column of one report (docs/simulation/README.md has the table).

A rule is switched off through the settings the policy states (``ChurnControl``,
``DebugLanes``), never by a code path of its own: an ablated run decides with the same pass as
the live scheduler, and its log re-derives like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from scheduling.debug_lane import DebugLanes
from services.simulator.engine import SimulationConfig

#: Long enough to never come within a simulated period (the settings refuse infinity).
NEVER_S = 10 * 365 * 86_400.0

PREFIX = "fairshare-no-"


def _no_gang_turn(config: SimulationConfig) -> SimulationConfig:
    return replace(config, churn=replace(config.churn, gang_turn=False))


def _no_holds(config: SimulationConfig) -> SimulationConfig:
    return replace(
        config,
        churn=replace(
            config.churn, hold_horizon_s=0.0, limit_hold_horizon_s=0.0, turn_hold_horizon_s=0.0
        ),
    )


def _no_turn_holds(config: SimulationConfig) -> SimulationConfig:
    return replace(config, churn=replace(config.churn, turn_hold_horizon_s=0.0))


def _no_starving(config: SimulationConfig) -> SimulationConfig:
    return replace(config, churn=replace(config.churn, starving_after_s=NEVER_S))


def _no_bound(config: SimulationConfig) -> SimulationConfig:
    unbounded = 1_000_000
    churn = replace(config.churn, max_preemptions=unbounded, drain_bound=unbounded)
    return replace(config, churn=churn)


def _no_churn_margin(config: SimulationConfig) -> SimulationConfig:
    churn = replace(config.churn, margin=0.0, margin_per_wasted_gpu_hour=0.0, owed_tolerance=0.0)
    return replace(config, churn=churn)


def _no_debug_lane(config: SimulationConfig) -> SimulationConfig:
    off = DebugLanes(
        default=replace(config.debug_lanes.default, enabled=False),
        pools=tuple(
            (pool, replace(lane, enabled=False)) for pool, lane in config.debug_lanes.pools
        ),
    )
    return replace(config, debug_lanes=off)


def _no_spread_stops(config: SimulationConfig) -> SimulationConfig:
    return replace(config, churn=replace(config.churn, earlier_stop_cost_s=0.0))


def _no_drain_past_bound(config: SimulationConfig) -> SimulationConfig:
    return replace(config, churn=replace(config.churn, drain_bound=config.churn.max_preemptions))


#: Rule -> (what switching it off means, the configuration without it).
RULES: dict[str, tuple[str, Callable[[SimulationConfig], SimulationConfig]]] = {
    "gang-turn": (
        "a budget whose gang exceeds what it is owed is never due its turn",
        _no_gang_turn,
    ),
    "holds": ("no nodes held free for a gang (by contracts or by time limits)", _no_holds),
    "turn-holds": (
        "a starving gang due its turn holds nodes 15 minutes ahead, as any other",
        _no_turn_holds,
    ),
    "starving": ("a starving gang catches up only where the victim keeps its share", _no_starving),
    "bound": ("no bound on the preemptions of one job", _no_bound),
    "churn-margin": ("catch-up with no margin, owed with no tolerance", _no_churn_margin),
    "debug-lane": ("no debug lane", _no_debug_lane),
    "spread-stops": ("victims weighed by their waste alone, not earlier stops", _no_spread_stops),
    "drain-past-bound": (
        "a drain waits for a job preempted as often as the bound",
        _no_drain_past_bound,
    ),
}


def parse_ablations(text: str) -> list[str]:
    """``RULE,RULE`` or ``all`` -> the rules, in the order of :data:`RULES`; ``ValueError``
    naming the known ones for anything else."""
    if not text.strip():
        return []
    if text.strip() == "all":
        return list(RULES)
    asked = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [rule for rule in asked if rule not in RULES]
    if unknown:
        raise ValueError(f"--ablate: unknown rule {', '.join(unknown)}; known: {', '.join(RULES)}")
    return [rule for rule in RULES if rule in asked]


def policy_name(rule: str) -> str:
    return PREFIX + rule


def config_for(policy: str, config: SimulationConfig) -> SimulationConfig:
    """The configuration ``policy`` runs with: ``config`` itself, or without the rule a
    ``fairshare-no-RULE`` policy names."""
    if policy.startswith(PREFIX):
        return RULES[policy.removeprefix(PREFIX)][1](config)
    return config


def is_fair_share(policy: str) -> bool:
    """Whether ``policy`` decides with the fair-share pass (the full policy or an ablation)."""
    return policy == "fairshare" or policy.startswith(PREFIX)

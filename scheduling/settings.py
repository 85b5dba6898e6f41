"""The policy's settings as a fact of the log, and back.

A pass depends on the facts and on how the policy is tuned (``PassContext``: the window, the
grace period, the preemption bound, churn control, the debug lanes). Whoever decides states its
tuning (``SchedulerSettings``) before it decides, so a reader of the log re-runs each pass with
the settings it ran with: the two functions here are that statement and its reading, each the
inverse of the other.
"""

from __future__ import annotations

import math
from dataclasses import replace

from events.models import ChurnSettings, DebugLaneSettings, SchedulerSettings, TimeLimitSettings
from scheduling.churn import ChurnControl
from scheduling.debug_lane import DebugLane, DebugLanes
from scheduling.scheduling_pass import PassContext
from scheduling.time_limits import TimeLimit, TimeLimits


def settings_of(ctx: PassContext) -> SchedulerSettings:
    """The settings ``ctx`` decides with, as the fact a leader states."""
    churn = ctx.churn
    lanes = [_lane_settings(None, ctx.debug_lanes.default)]
    lanes += [_lane_settings(pool, lane) for pool, lane in ctx.debug_lanes.pools]
    return SchedulerSettings(
        window_s=ctx.window_s,
        grace_period_s=ctx.grace_period_s,
        max_preemption_searches=ctx.max_preemption_searches,
        preemption=ctx.preemption,
        churn=ChurnSettings(
            margin=None if math.isinf(churn.margin) else churn.margin,
            margin_per_wasted_gpu_hour=churn.margin_per_wasted_gpu_hour,
            owed_tolerance=churn.owed_tolerance,
            hold_horizon_s=churn.hold_horizon_s,
            starving_after_s=churn.starving_after_s,
            max_preemptions=churn.max_preemptions,
            drain_bound=churn.drain_bound,
            earlier_stop_cost_s=churn.earlier_stop_cost_s,
            limit_hold_horizon_s=churn.limit_hold_horizon_s,
            turn_hold_horizon_s=churn.turn_hold_horizon_s,
            gang_turn=churn.gang_turn,
        ),
        debug_lanes=tuple(lanes),
        time_limits=time_limit_settings(ctx.time_limits),
    )


def with_settings(ctx: PassContext, settings: SchedulerSettings) -> PassContext:
    """``ctx`` deciding with ``settings`` (what :func:`settings_of` stated)."""
    churn = settings.churn
    default, *pools = settings.debug_lanes
    return replace(
        ctx,
        window_s=settings.window_s,
        grace_period_s=settings.grace_period_s,
        max_preemption_searches=settings.max_preemption_searches,
        preemption=settings.preemption,
        churn=ChurnControl(
            margin=math.inf if churn.margin is None else churn.margin,
            margin_per_wasted_gpu_hour=churn.margin_per_wasted_gpu_hour,
            owed_tolerance=churn.owed_tolerance,
            hold_horizon_s=churn.hold_horizon_s,
            starving_after_s=churn.starving_after_s,
            max_preemptions=churn.max_preemptions,
            drain_bound=churn.max_preemptions if churn.drain_bound is None else churn.drain_bound,
            earlier_stop_cost_s=churn.earlier_stop_cost_s,
            limit_hold_horizon_s=churn.limit_hold_horizon_s,
            turn_hold_horizon_s=churn.turn_hold_horizon_s,
            gang_turn=churn.gang_turn,
        ),
        debug_lanes=DebugLanes(
            default=_lane(default),
            pools=tuple((str(lane.pool), _lane(lane)) for lane in pools),
        ),
        time_limits=time_limits_of(settings),
    )


def time_limit_settings(limits: TimeLimits) -> tuple[TimeLimitSettings, ...]:
    """``limits`` as stated: the default first, then one per pool that has its own."""
    stated = [TimeLimitSettings(default_s=limits.default.default_s, max_s=limits.default.max_s)]
    stated += [
        TimeLimitSettings(pool=pool, default_s=limit.default_s, max_s=limit.max_s)
        for pool, limit in limits.pools
    ]
    return tuple(stated)


def time_limits_of(settings: SchedulerSettings | None) -> TimeLimits:
    """The time limits ``settings`` state (the system defaults when nobody stated any yet): what
    the API checks a submission against and what start estimates assume."""
    if settings is None:
        return TimeLimits()
    default, *pools = settings.time_limits
    return TimeLimits(
        default=TimeLimit(default.default_s, default.max_s),
        pools=tuple((str(p.pool), TimeLimit(p.default_s, p.max_s)) for p in pools),
    )


def _lane_settings(pool: str | None, lane: DebugLane) -> DebugLaneSettings:
    return DebugLaneSettings(
        pool=pool,
        enabled=lane.enabled,
        max_gpus=lane.max_gpus,
        max_min_runtime_s=lane.max_min_runtime_s,
        lookback_s=lane.lookback_s,
        service_level=lane.service_level,
        max_reserve_fraction=lane.max_reserve_fraction,
        max_lane_fraction=lane.max_lane_fraction,
        patience_s=float(lane.patience_s),
    )


def _lane(settings: DebugLaneSettings) -> DebugLane:
    return DebugLane(
        enabled=settings.enabled,
        max_gpus=settings.max_gpus,
        max_min_runtime_s=settings.max_min_runtime_s,
        lookback_s=settings.lookback_s,
        service_level=settings.service_level,
        max_reserve_fraction=settings.max_reserve_fraction,
        max_lane_fraction=settings.max_lane_fraction,
        patience_s=settings.patience_s,
    )

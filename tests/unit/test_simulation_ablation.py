"""``fairshare simulate --ablate``: each rule is switched off through the settings the policy
states, so an ablated run decides with the live pass and its log replays like any other."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from scheduling.scheduling_pass import PassContext
from scheduling.settings import settings_of, with_settings
from services.simulator.ablation import RULES, config_for, parse_ablations, policy_name
from services.simulator.cli import simulate_app
from services.simulator.engine import SimulationConfig

BASE = SimulationConfig(gpus=16)


def _context(config: SimulationConfig) -> PassContext:
    return PassContext(now=0.0, churn=config.churn, debug_lanes=config.debug_lanes)


def test_all_and_lists_parse_in_one_order_and_unknown_rules_are_named() -> None:
    assert parse_ablations("all") == list(RULES)
    assert parse_ablations("holds, gang-turn") == ["gang-turn", "holds"]
    assert parse_ablations("") == []
    with pytest.raises(ValueError, match="unknown rule nope; known: gang-turn"):
        parse_ablations("holds,nope")


@pytest.mark.parametrize("rule", list(RULES))
def test_each_rule_off_changes_what_the_policy_states_and_survives_the_log(rule: str) -> None:
    ablated = config_for(policy_name(rule), BASE)
    stated = settings_of(_context(ablated))
    assert stated != settings_of(_context(BASE)), f"{rule}: nothing the policy states changed"
    # Stated and read back, the ablated run's settings are the ones it decided with.
    replayed = with_settings(PassContext(now=0.0), stated)
    assert (replayed.churn, replayed.debug_lanes) == (ablated.churn, ablated.debug_lanes)


def test_the_full_policy_and_baselines_keep_the_configuration() -> None:
    assert config_for("fairshare", BASE) is BASE
    assert config_for("fifo", BASE) is BASE


def test_an_unknown_rule_exits_2_before_anything_runs() -> None:
    result = CliRunner().invoke(
        simulate_app, ["--synthetic", "--ablate", "holds,nope", "--out", "/nonexistent/x"]
    )
    assert result.exit_code == 2
    assert "unknown rule nope" in result.output

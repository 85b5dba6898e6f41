"""The whole API fuzzed from its own OpenAPI document (schemathesis, on Hypothesis): bodies,
paths and query parameters generated for every route, valid and invalid, as an admin and as a
plain member. No answer is a 5xx, and no 4xx publishes anything.

The default run is a quick pass (a few examples per operation) so the fast test command keeps
it; the slow run (``-m slow``, in CI) tries many more.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

from tests.unit.test_api import ADMIN, ANA, build_world

WORLD = build_world()
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", WORLD.app)
SCHEMA.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], allow_x00=True
)
#: Writes wait this long for the view to show them; the in-memory view shows them at once.
WORLD.app.state.application.read_your_writes_s = 0.05


def _check(case: schemathesis.Case, who: dict[str, str]) -> None:
    before = len(WORLD.records())
    response = case.call(headers=who)
    if response.status_code == 503 and "no read-model database configured" in response.text:
        return  # the reports and statements read the read models, which this world has not
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
    if 400 <= response.status_code < 500:
        assert len(WORLD.records()) == before, (
            f"{case.method} {case.formatted_path} answered {response.status_code} "
            "but published an event"
        )


QUICK = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)


@SCHEMA.parametrize()
@QUICK
def test_no_generated_request_is_a_server_error_as_admin(case: schemathesis.Case) -> None:
    _check(case, ADMIN)


@SCHEMA.parametrize()
@QUICK
def test_no_generated_request_is_a_server_error_as_a_member(case: schemathesis.Case) -> None:
    _check(case, ANA)


@pytest.mark.slow
@SCHEMA.parametrize()
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_many_generated_requests_are_never_a_server_error(case: schemathesis.Case) -> None:
    _check(case, ADMIN)

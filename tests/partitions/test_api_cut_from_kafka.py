"""Issue 45, scenario 5: the API cut from Kafka (the API alive, its clients reaching it, every
broker out of its reach), then healed.

A write during the cut gets a clear 503 within the write timeout, saying it may still be
recorded and to retry the same request. It may indeed land later: the produce request sent
into the cut connection is retransmitted by TCP once the link heals, and the broker writes it
(found here: the 503 said "it was not recorded"). What is guaranteed instead: a record the
producer never sent expires with the request (``services.api.application.WRITE_TIMEOUT_S``:
with librdkafka's default it could be written 20 s after the 503), the API serves writes again
by itself after the heal, the retried request succeeds, and the log holds every write once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services.api.application import WRITE_TIMEOUT_S
from tests.partitions.netns import Network
from tests.partitions.services_in_netns import (
    ApiClient,
    Started,
    admin_token,
    records_keyed,
    start_api,
    start_kafka,
    stopping,
)
from tests.real_kafka import kafka_runtime_or_skip

pytestmark = pytest.mark.slow

#: The producer's verdict on a timed-out record comes within about a second of its timeout.
ANSWER_WITHIN_S = WRITE_TIMEOUT_S + 5.0
#: Writes served again after the heal (the producer reconnects with a back-off of up to 10 s).
RECOVERED_WITHIN_S = 30.0


def test_a_write_while_the_api_is_cut_from_kafka_gets_a_503_and_its_retry_records_it_once(
    make_network: Callable[..., Network], tmp_path: Path
) -> None:
    kafka_runtime_or_skip()
    net = make_network("kafka", "api", "client")
    with stopping(Started()) as started:
        bootstrap = start_kafka(net, ["kafka"], tmp_path / "kafka", started)
        tokens, token = admin_token(tmp_path)
        url = start_api(net, "api", bootstrap, tokens, tmp_path, started)
        api = ApiClient(net, "client", url, token)
        api.wait_ready()
        assert api.call("POST", "/budgets", {"budget": "lab"}).status_code == 201
        assert api.call("POST", "/budgets", {"budget": "lab/before"}).status_code == 201

        with net.bounded_fault(lambda: net.cut("api", "kafka"), at_most_s=120):
            began = time.monotonic()
            refused = api.call("POST", "/budgets", {"budget": "lab/during"})
            answered_s = time.monotonic() - began
            assert refused.status_code == 503, refused.text
            assert answered_s <= ANSWER_WITHIN_S, f"answered after {answered_s:.1f} s"
            assert refused.headers.get("retry-after"), "says when to retry"
            assert "Retry the same request" in refused.json()["detail"]
            assert "may still be recorded" in refused.json()["detail"]

        # healed: writes are served again, by itself
        began = time.monotonic()
        while True:
            after = api.call("POST", "/budgets", {"budget": "lab/after"})
            if after.status_code == 201:
                break
            assert after.status_code == 503, after.text
            assert time.monotonic() - began < RECOVERED_WITHIN_S, "writes not served again"
            time.sleep(1)
        # the refused write, retried as the 503 says: recorded (now, or by the retransmission
        # of the request the cut held), and once
        retried = api.call("POST", "/budgets", {"budget": "lab/during"})
        assert retried.status_code in (200, 201), retried.text

        keys = records_keyed(net, "client", bootstrap, "part.budgets")
        for budget in (b"lab/before", b"lab/during", b"lab/after"):
            assert keys.count(budget) == 1, (budget, keys)

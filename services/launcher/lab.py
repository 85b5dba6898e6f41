"""The demo lab: the budgets and members ``fairshare up`` writes to an empty log, and the
demo users whose API tokens the workload stream submits with."""

from __future__ import annotations

from datetime import UTC, datetime

from events import TopicKind, Topics, new_event
from events.envelope import derived_event_id
from events.models import BudgetCreated, EventData, MembershipGranted
from events.signing import Signer

#: The demo lab: (budget, weight) and (user, budget, role); tokens are the API's demo tokens.
LAB_BUDGETS = (("lab", 1.0), ("lab/vision", 2.0), ("lab/robotics", 1.0), ("lab/nlp", 1.0))
LAB_MEMBERS = (
    ("ana", "lab/vision", "member"),
    ("bo", "lab/robotics", "member"),
    ("chen", "lab/nlp", "member"),
    ("chen", "lab", "manager"),
)
USERS = {"ana": ("ana-token", "lab/vision"), "bo": ("bo-token", "lab/robotics"),
         "chen": ("chen-token", "lab/nlp")}  # fmt: skip


def seed_lab(bootstrap: str, topics: Topics, admin: Signer | None = None) -> bool:
    """Write the demo lab if the budgets topic is empty, signed by ``admin`` (the operators'
    own facts, as an admin would write them by hand); True if it did."""
    from services.bus.export import read_to_end
    from services.bus.kafka import KafkaEventPublisher
    from services.bus.signing import signed

    if any(True for _ in read_to_end(bootstrap, [topics.name(TopicKind.BUDGETS)])):
        return False
    facts: list[EventData] = [
        BudgetCreated(budget=b, weight=w, created_by="admin", description="demo lab")
        for b, w in LAB_BUDGETS
    ]
    facts += [
        MembershipGranted(budget=b, user=u, role=r, granted_by="admin")  # type: ignore[arg-type]
        for u, b, r in LAB_MEMBERS
    ]
    publisher = signed(KafkaEventPublisher(bootstrap, topics, client_id="fairshare-up"), admin)
    try:
        now = datetime.now(UTC)
        for i, data in enumerate(facts):
            publisher.publish(
                new_event(
                    data, source="fairshare/up", time=now, event_id=derived_event_id("up", str(i))
                )
            )
        publisher.flush()
    finally:
        publisher.close()
    return True

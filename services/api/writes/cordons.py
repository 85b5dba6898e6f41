"""Writes of ``/nodes/{node}/cordon`` and ``/uncordon``: stop new placements on a node (its
work drains as contracts end), or return it to service (admins)."""

from __future__ import annotations

from events.models import EventData, NodeCordoned, NodeUncordoned
from projections.live_state import LiveState
from services.api import auth, queries
from services.api import models as m
from services.api.application import Application, Result
from services.api.auth import Principal
from services.api.errors import Forbidden
from services.api.writes.skeleton import Publish, Unchanged, write


def set_cordon(
    app: Application, who: Principal, node: str, cordon: bool, reason: str = ""
) -> Result[m.NodeAnswer]:
    """Cordon (stop new placements; work drains as contracts end) or uncordon a node: admins.
    UNCHANGED if it already is so."""

    def check(state: LiveState) -> Unchanged[m.NodeAnswer] | Publish[m.NodeAnswer]:
        refusal = auth.may_operate_nodes(who)
        if refusal is not None:
            raise Forbidden(refusal, user=who.user)
        found = queries.node_or_404(state, node, user=who.user)
        if found.cordoned == cordon:
            return Unchanged(queries.node_view(found))
        data: EventData = (
            NodeCordoned(node=node, cordoned_by=who.user, reason=reason)
            if cordon
            else NodeUncordoned(node=node, uncordoned_by=who.user)
        )
        return Publish(data, lambda _: _node_now(app, node))

    return write(app, who, check, lambda envelope: m.NodeAccepted(event_id=envelope.id, node=node))


def _node_now(app: Application, node: str) -> m.NodeView:
    with app.view.read() as state:
        return queries.node_view(state.cluster.nodes[node])

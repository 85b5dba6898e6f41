"""A client of the Fairshare API: one method per endpoint, answers parsed into the API's
own models (:mod:`services.api.models`), so a caller reads typed attributes and a change of
the API's answers shows up in the type checker, not in a KeyError at a user's terminal.
Requests go through a :mod:`transport <services.client.transport>`: the standard library's
by default, or an ``httpx.Client`` the caller hands in (FastAPI's test client).

The models (pydantic and the events) are imported when the first answer is parsed, not with
this module: a command that cannot reach the API, or only prints its ``--help``, never pays
for them."""

from __future__ import annotations

import json as json_codec
import logging
import os
import ssl
from collections.abc import Callable, Mapping
from functools import cache, cached_property
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from services.client.constants import DEFAULT_API as DEFAULT_API
from services.client.transport import DirectTransport, HttpxTransport, Transport, UnreachableError

if TYPE_CHECKING:
    import httpx
    from pydantic import TypeAdapter

    from services.api.models import (
        AccountBindingAnswer,
        AccountBindingList,
        ArrayCancelView,
        ArraySubmitAnswer,
        ArraySubmitRequest,
        ArrayView,
        BudgetAnswer,
        BudgetDetail,
        BudgetReport,
        CancelAnswer,
        Me,
        MemberAnswer,
        NamespaceBindingAnswer,
        NamespaceBindingList,
        NodeAnswer,
        NodeList,
        PoolList,
        PriceAnswer,
        PriceList,
        QueueView,
        RevokeAnswer,
        SubmitAnswer,
        SubmitRequest,
        WeightAnswer,
        WhyView,
        WorkloadList,
        WorkloadView,
    )
    from services.api.money import StatementList, StatementView

log = logging.getLogger(__name__)

T = TypeVar("T")


def _models() -> ModuleType:
    from services.api import models

    return models


def _money() -> ModuleType:
    from services.api import money

    return money


def _adapter(answer: type[T]) -> TypeAdapter[T]:
    from pydantic import TypeAdapter

    return TypeAdapter(answer)


class _Answers:
    """A validator of each of the API's answers, each built on its first use: a command
    reads one or two answers, and building all of them cost every command 0.2 s."""

    @cached_property
    def submit(self) -> TypeAdapter[SubmitAnswer]:
        return _adapter(_models().SubmitAnswer)

    @cached_property
    def submit_array(self) -> TypeAdapter[ArraySubmitAnswer]:
        return _adapter(_models().ArraySubmitAnswer)

    @cached_property
    def array(self) -> TypeAdapter[ArrayView]:
        return _adapter(_models().ArrayView)

    @cached_property
    def cancel_array(self) -> TypeAdapter[ArrayCancelView]:
        return _adapter(_models().ArrayCancelView)

    @cached_property
    def cancel(self) -> TypeAdapter[CancelAnswer]:
        return _adapter(_models().CancelAnswer)

    @cached_property
    def weight(self) -> TypeAdapter[WeightAnswer]:
        return _adapter(_models().WeightAnswer)

    @cached_property
    def member(self) -> TypeAdapter[MemberAnswer]:
        return _adapter(_models().MemberAnswer)

    @cached_property
    def binding(self) -> TypeAdapter[NamespaceBindingAnswer]:
        return _adapter(_models().NamespaceBindingAnswer)

    @cached_property
    def bindings(self) -> TypeAdapter[NamespaceBindingList]:
        return _adapter(_models().NamespaceBindingList)

    @cached_property
    def account_binding(self) -> TypeAdapter[AccountBindingAnswer]:
        return _adapter(_models().AccountBindingAnswer)

    @cached_property
    def account_bindings(self) -> TypeAdapter[AccountBindingList]:
        return _adapter(_models().AccountBindingList)

    @cached_property
    def node(self) -> TypeAdapter[NodeAnswer]:
        return _adapter(_models().NodeAnswer)

    @cached_property
    def budget(self) -> TypeAdapter[BudgetAnswer]:
        return _adapter(_models().BudgetAnswer)

    @cached_property
    def revoke(self) -> TypeAdapter[RevokeAnswer]:
        return _adapter(_models().RevokeAnswer)

    @cached_property
    def pools(self) -> TypeAdapter[PoolList]:
        return _adapter(_models().PoolList)

    @cached_property
    def workloads(self) -> TypeAdapter[WorkloadList]:
        return _adapter(_models().WorkloadList)

    @cached_property
    def workload(self) -> TypeAdapter[WorkloadView]:
        return _adapter(_models().WorkloadView)

    @cached_property
    def why(self) -> TypeAdapter[WhyView]:
        return _adapter(_models().WhyView)

    @cached_property
    def queue(self) -> TypeAdapter[QueueView]:
        return _adapter(_models().QueueView)

    @cached_property
    def budgets(self) -> TypeAdapter[BudgetReport]:
        return _adapter(_models().BudgetReport)

    @cached_property
    def nodes(self) -> TypeAdapter[NodeList]:
        return _adapter(_models().NodeList)

    @cached_property
    def me(self) -> TypeAdapter[Me]:
        return _adapter(_models().Me)

    @cached_property
    def price(self) -> TypeAdapter[PriceAnswer]:
        return _adapter(_models().PriceAnswer)

    @cached_property
    def prices(self) -> TypeAdapter[PriceList]:
        return _adapter(_models().PriceList)

    @cached_property
    def budget_detail(self) -> TypeAdapter[BudgetDetail]:
        return _adapter(_models().BudgetDetail)

    @cached_property
    def statement(self) -> TypeAdapter[StatementView]:
        return _adapter(_money().StatementView)

    @cached_property
    def statements(self) -> TypeAdapter[StatementList]:
        return _adapter(_money().StatementList)


@cache
def _answers() -> _Answers:
    return _Answers()


#: Picks the validator of one answer out of :class:`_Answers`.
_Pick = Callable[[_Answers], "TypeAdapter[T]"]


class ApiError(RuntimeError):
    """The API refused a request (status and its detail), or could not be reached (status 0)."""

    def __init__(self, status: int, detail: Any, url: str = "") -> None:
        self.status = status
        self.detail = detail
        self.url = url
        super().__init__(f"HTTP {status}: {format_detail(detail)}" if status else str(detail))


def format_detail(detail: Any) -> str:
    """FastAPI's detail: a string, or a list of validation errors naming their field."""
    if isinstance(detail, list):
        parts = []
        for error in detail:
            if isinstance(error, dict):
                loc = [str(p) for p in error.get("loc", []) if p != "body"]
                parts.append(f"{'.'.join(loc) or 'request'}: {error.get('msg', error)}")
            else:
                parts.append(str(error))
        return "; ".join(parts)
    return str(detail)


def _query_value(value: Any) -> str:
    """A query parameter as httpx wrote one: booleans in lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _segment(text: str, safe: str = "") -> str:
    """``text`` quoted for a URL path (one segment; a budget path keeps its ``/``: ``safe``).
    An argument that is not valid UTF-8 (the shell hands Python undecodable bytes as lone
    surrogates) is an :class:`ApiError`, not a traceback."""
    try:
        return quote(text, safe=safe)
    except UnicodeEncodeError as error:
        raise ApiError(0, f"{text!r} is not UTF-8 text") from error


def trust(ca: str | os.PathLike[str] | None, base_url: str) -> ssl.SSLContext:
    """What an https connection trusts: the system's CAs, plus ``ca`` (or ``$FAIRSHARE_API_CA``)
    for an API whose certificate a private CA signed. The certificate and its host name are
    always checked: there is no way to turn that off here, since a client that accepts any
    certificate hands its token to whoever answers. A plain-HTTP ``base_url`` speaks no TLS,
    so without a ``ca`` no CA bundle is loaded for it (a bundle took 60 ms of every command):
    a context that trusts nothing keeps any https out of reach through it."""
    path = ca if ca is not None else (os.environ.get("FAIRSHARE_API_CA") or None)
    if path is None:
        if base_url.startswith("https://"):
            return ssl.create_default_context()
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        return ssl.create_default_context(cafile=os.fspath(path))
    except (OSError, ssl.SSLError) as error:
        raise ApiError(0, f"cannot use the CA certificate {os.fspath(path)}: {error}") from error


class FairshareClient:
    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout_s: float = 30.0,
        ca: str | os.PathLike[str] | None = None,
    ) -> None:
        """``ca``: a CA certificate (PEM) to trust for an https ``base_url`` besides the
        system's (default ``$FAIRSHARE_API_CA``); a file that cannot be read is an
        :class:`ApiError` here, not a failure of every request."""
        self.base_url = (base_url or os.environ.get("FAIRSHARE_API") or DEFAULT_API).rstrip("/")
        self.token = token if token is not None else os.environ.get("FAIRSHARE_TOKEN")
        self._transport: Transport = (
            HttpxTransport(http)
            if http is not None
            else DirectTransport(timeout_s, trust(ca, self.base_url))
        )
        #: HTTP status of the last successful call (200 repeated submit, 201 new, 202 accepted).
        self.last_status = 0

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> FairshareClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """The answer's JSON as it came (errors raised as :class:`ApiError`)."""
        url = f"{self.base_url}{path}"
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        clean = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        try:
            content = None
            if json is not None:
                content = json_codec.dumps(json, ensure_ascii=False).encode()
                headers["Content-Type"] = "application/json"
            reply = self._transport.send(method, url, params=clean, body=content, headers=headers)
        except UnreachableError as error:
            raise ApiError(0, f"cannot reach the API at {self.base_url}: {error}", url) from error
        except UnicodeEncodeError as error:  # an argument of undecodable bytes, in body or query
            bad = error.object[error.start : error.end]
            raise ApiError(0, f"cannot send {bad!r}: not UTF-8 text", url) from error
        log.debug("api call", extra={"method": method, "url": url, "status": reply.status})
        text = reply.body.decode(errors="replace")
        try:
            body = json_codec.loads(text)
        except ValueError:
            body = text
        if reply.status >= 400:
            detail = body.get("detail", body) if isinstance(body, dict) else body
            raise ApiError(reply.status, detail, url)
        self.last_status = reply.status
        return body

    def _call(
        self,
        answer: _Pick[T],
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
    ) -> T:
        body = self.request(method, path, json=json, params=params)
        from pydantic import ValidationError

        try:
            return answer(_answers()).validate_python(body)
        except ValidationError as error:
            url = f"{self.base_url}{path}"
            raise ApiError(
                self.last_status, f"unexpected answer from the API: {error}", url
            ) from None

    # -- workloads ----------------------------------------------------------------------------
    def submit(self, request: SubmitRequest | Mapping[str, Any]) -> SubmitAnswer:
        """A mapping is sent as it is: the API validates it and names a bad field (422)."""
        body = request if isinstance(request, Mapping) else request.model_dump(mode="json")
        return self._call(lambda a: a.submit, "POST", "/workloads", json=dict(body))

    def cancel(self, workload_id: str, reason: str = "") -> CancelAnswer:
        path = f"/workloads/{_segment(workload_id)}/cancel"
        return self._call(lambda a: a.cancel, "POST", path, json={"reason": reason})

    def submit_array(self, request: ArraySubmitRequest | Mapping[str, Any]) -> ArraySubmitAnswer:
        """A job array; a mapping is sent as it is (the API names a bad field, 422)."""
        body = request if isinstance(request, Mapping) else request.model_dump(mode="json")
        return self._call(lambda a: a.submit_array, "POST", "/arrays", json=dict(body))

    def array(self, array_id: str) -> ArrayView:
        return self._call(lambda a: a.array, "GET", f"/arrays/{_segment(array_id)}")

    def cancel_array(self, array_id: str, reason: str = "") -> ArrayCancelView:
        path = f"/arrays/{_segment(array_id)}/cancel"
        return self._call(lambda a: a.cancel_array, "POST", path, json={"reason": reason})

    def workloads(
        self,
        *,
        status: str | None = None,
        budget: str | None = None,
        submitter: str | None = None,
        pool: str | None = None,
        limit: int | None = None,
        preempted: bool | None = None,
        array: str | None = None,
    ) -> WorkloadList:
        filters = {
            "status": status,
            "budget": budget,
            "submitter": submitter,
            "pool": pool,
            "limit": limit,
            "preempted": preempted,
            "array": array,
        }
        return self._call(lambda a: a.workloads, "GET", "/workloads", params=filters)

    def history(
        self,
        *,
        budget: str | None = None,
        submitter: str | None = None,
        pool: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        array: str | None = None,
    ) -> WorkloadList:
        """Finished work, the latest end first (``array``: only its elements)."""
        filters = {
            "budget": budget,
            "submitter": submitter,
            "pool": pool,
            "since": since,
            "limit": limit,
            "array": array,
        }
        return self._call(lambda a: a.workloads, "GET", "/history", params=filters)

    def workload(self, workload_id: str) -> WorkloadView:
        return self._call(lambda a: a.workload, "GET", f"/workloads/{_segment(workload_id)}")

    def why(self, workload_id: str) -> WhyView:
        return self._call(lambda a: a.why, "GET", f"/workloads/{_segment(workload_id)}/why")

    def queue(
        self,
        *,
        pool: str | None = None,
        budget: str | None = None,
        submitter: str | None = None,
        reasons: bool | None = None,
        start: bool | None = None,
        array: str | None = None,
    ) -> QueueView:
        filters = {
            "pool": pool,
            "budget": budget,
            "submitter": submitter,
            "reasons": reasons,
            "start": start,
            "array": array,
        }
        return self._call(lambda a: a.queue, "GET", "/queue", params=filters)

    # -- budgets and nodes --------------------------------------------------------------------
    def budgets(self, pool: str | None = None) -> BudgetReport:
        return self._call(lambda a: a.budgets, "GET", "/budgets", params={"pool": pool})

    def budget(self, budget: str) -> BudgetDetail:
        """One budget's figures per pool (share, delivered and owed over the window)."""
        path = f"/budgets/{_segment(budget, '/')}"
        return self._call(lambda a: a.budget_detail, "GET", path)

    def statement(
        self,
        budget: str,
        month: str | None = None,
        *,
        idle: str | None = None,
        workloads: bool | None = None,
    ) -> StatementView:
        """A budget subtree's statement and forecast for a month (default: the current)."""
        path = f"/budgets/{_segment(budget, '/')}/statement"
        query = {"month": month, "idle": idle, "workloads": workloads}
        return self._call(lambda a: a.statement, "GET", path, params=query)

    def statements(
        self, month: str | None = None, *, idle: str | None = None, workloads: bool | None = None
    ) -> StatementList:
        """Every budget's statement for a month."""
        query = {"month": month, "idle": idle, "workloads": workloads}
        return self._call(lambda a: a.statements, "GET", "/statements", params=query)

    def set_weight(
        self, budget: str, weight: float, pool: str | None = None, reason: str = ""
    ) -> WeightAnswer:
        body: dict[str, Any] = {"weight": weight, "reason": reason}
        if pool is not None:
            body["pool"] = pool
        return self._call(
            lambda a: a.weight, "PUT", f"/budgets/{_segment(budget, '/')}/weight", json=body
        )

    def add_member(self, budget: str, user: str, role: str = "member") -> MemberAnswer:
        body = {"user": user, "role": role}
        return self._call(
            lambda a: a.member, "POST", f"/budgets/{_segment(budget, '/')}/members", json=body
        )

    def create_budget(
        self,
        budget: str,
        weight: float = 1.0,
        pool_weights: Mapping[str, float] | None = None,
        description: str = "",
    ) -> BudgetAnswer:
        body = {
            "budget": budget,
            "weight": weight,
            "pool_weights": dict(pool_weights or {}),
            "description": description,
        }
        return self._call(lambda a: a.budget, "POST", "/budgets", json=body)

    def close_budget(self, budget: str, reason: str = "") -> BudgetAnswer:
        path = f"/budgets/{_segment(budget, '/')}/close"
        return self._call(lambda a: a.budget, "POST", path, json={"reason": reason})

    def revoke_member(self, budget: str, user: str, role: str = "member") -> RevokeAnswer:
        path = f"/budgets/{_segment(budget, '/')}/members/{_segment(user)}"
        return self._call(lambda a: a.revoke, "DELETE", path, params={"role": role})

    def bind_namespace(
        self, budget: str, cluster: str, namespace: str, default: bool = False
    ) -> NamespaceBindingAnswer:
        """Let a Kubernetes namespace of a cluster charge ``budget`` (as its default)."""
        body = {"cluster": cluster, "namespace": namespace, "default": default}
        path = f"/budgets/{_segment(budget, '/')}/namespaces"
        return self._call(lambda a: a.binding, "POST", path, json=body)

    def unbind_namespace(self, budget: str, cluster: str, namespace: str) -> NamespaceBindingAnswer:
        path = (
            f"/budgets/{_segment(budget, '/')}/namespaces/{_segment(cluster)}/{_segment(namespace)}"
        )
        return self._call(lambda a: a.binding, "DELETE", path)

    def namespaces(self, cluster: str | None = None) -> NamespaceBindingList:
        """Which Kubernetes namespaces may charge which budgets (of one cluster)."""
        return self._call(lambda a: a.bindings, "GET", "/namespaces", params={"cluster": cluster})

    def bind_account(self, budget: str, cluster: str, account: str) -> AccountBindingAnswer:
        """Let a Slurm account of a cluster charge ``budget``: always its default (an account
        charges one budget; binding it to another replaces the earlier one)."""
        body = {"cluster": cluster, "account": account}
        path = f"/budgets/{_segment(budget, '/')}/accounts"
        return self._call(lambda a: a.account_binding, "POST", path, json=body)

    def unbind_account(self, budget: str, cluster: str, account: str) -> AccountBindingAnswer:
        path = f"/budgets/{_segment(budget, '/')}/accounts/{_segment(cluster)}/{_segment(account)}"
        return self._call(lambda a: a.account_binding, "DELETE", path)

    def accounts(self, cluster: str | None = None) -> AccountBindingList:
        """Which Slurm accounts may charge which budgets (of one cluster)."""
        return self._call(
            lambda a: a.account_bindings, "GET", "/accounts", params={"cluster": cluster}
        )

    def pools(self) -> PoolList:
        return self._call(lambda a: a.pools, "GET", "/pools")

    def nodes(self, pool: str | None = None) -> NodeList:
        return self._call(lambda a: a.nodes, "GET", "/nodes", params={"pool": pool})

    def cordon(self, node: str, reason: str = "") -> NodeAnswer:
        path = f"/nodes/{_segment(node)}/cordon"
        return self._call(lambda a: a.node, "POST", path, json={"reason": reason})

    def uncordon(self, node: str) -> NodeAnswer:
        return self._call(lambda a: a.node, "POST", f"/nodes/{_segment(node)}/uncordon")

    def me(self) -> Me:
        return self._call(lambda a: a.me, "GET", "/me")

    # -- prices -------------------------------------------------------------------------------
    def prices(self, pool: str | None = None) -> PriceList:
        return self._call(lambda a: a.prices, "GET", "/prices", params={"pool": pool})

    def set_price(
        self,
        pool: str,
        per_gpu_hour: str | float,
        currency: str,
        *,
        effective_at: str | None = None,
        budget: str | None = None,
        reason: str = "",
    ) -> PriceAnswer:
        """``per_gpu_hour`` is best sent as decimal text (``"2.35"``): the API keeps it exact."""
        body: dict[str, Any] = {
            "pool": pool,
            "currency": currency,
            "per_gpu_hour": per_gpu_hour,
            "reason": reason,
        }
        if effective_at is not None:
            body["effective_at"] = effective_at
        if budget is not None:
            body["budget"] = budget
        return self._call(lambda a: a.price, "POST", "/prices", json=body)

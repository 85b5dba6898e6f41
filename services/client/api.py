"""An httpx client of the Fairshare API: one method per endpoint, JSON in and out."""

from __future__ import annotations

import logging
import os
from typing import Any
from urllib.parse import quote

import httpx

log = logging.getLogger(__name__)

DEFAULT_API = "http://127.0.0.1:8000"


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


class FairshareClient:
    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.base_url = (base_url or os.environ.get("FAIRSHARE_API") or DEFAULT_API).rstrip("/")
        self.token = token if token is not None else os.environ.get("FAIRSHARE_TOKEN")
        self._owns_http = http is None
        self._http = http or httpx.Client(timeout=timeout_s)
        #: HTTP status of the last successful call (200 repeated submit, 201 new, 202 accepted).
        self.last_status = 0

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> FairshareClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        url = f"{self.base_url}{path}"
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, url, json=json, params=clean, headers=headers)
        except httpx.HTTPError as error:
            raise ApiError(0, f"cannot reach the API at {self.base_url}: {error}", url) from error
        log.debug("api call", extra={"method": method, "url": url, "status": response.status_code})
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code >= 400:
            detail = body.get("detail", body) if isinstance(body, dict) else body
            raise ApiError(response.status_code, detail, url)
        self.last_status = response.status_code
        return body

    # -- workloads ----------------------------------------------------------------------------
    def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/workloads", json=request)
        return result

    def cancel(self, workload_id: str, reason: str = "") -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "POST", f"/workloads/{quote(workload_id, safe='')}/cancel", json={"reason": reason}
        )
        return result

    def workloads(self, **filters: str | None) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/workloads", params=filters)
        return result

    def workload(self, workload_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/workloads/{quote(workload_id, safe='')}")
        return result

    def why(self, workload_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "GET", f"/workloads/{quote(workload_id, safe='')}/why"
        )
        return result

    def queue(self, **filters: str | None) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/queue", params=filters)
        return result

    # -- budgets and nodes --------------------------------------------------------------------
    def budgets(self, pool: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/budgets", params={"pool": pool})
        return result

    def set_weight(
        self, budget: str, weight: float, pool: str | None = None, reason: str = ""
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"weight": weight, "reason": reason}
        if pool is not None:
            body["pool"] = pool
        result: dict[str, Any] = self.request("PUT", f"/budgets/{budget}/weight", json=body)
        return result

    def add_member(self, budget: str, user: str, role: str = "member") -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "POST", f"/budgets/{budget}/members", json={"user": user, "role": role}
        )
        return result

    def nodes(self, pool: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/nodes", params={"pool": pool})
        return result

    def cordon(self, node: str, reason: str = "") -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "POST", f"/nodes/{quote(node, safe='')}/cordon", json={"reason": reason}
        )
        return result

    def uncordon(self, node: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"/nodes/{quote(node, safe='')}/uncordon")
        return result

    def me(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/me")
        return result

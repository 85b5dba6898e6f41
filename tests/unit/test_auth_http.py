"""Auth over HTTP: the dashboard's sign-in cookie (reads only, never writes), tokens never
taken from a URL, and the security headers on every answer."""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from events.envelope import new_event
from events.models import BudgetCreated, NodeRegistered
from services.api import create_app, default_tokens
from services.api.deps import SESSION_COOKIE
from services.api.security import (
    CONTENT_SECURITY_POLICY,
    RedactTokenQuery,
    install_security_headers,
)
from services.api.view import LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher
from services.dashboard import STATIC
from tests.factories import T0

ADMIN = {"Authorization": "Bearer admin-token"}
JSON = {"Content-Type": "application/json"}


def _app() -> FastAPI:
    view = LiveView()
    view.feed(
        new_event(BudgetCreated(budget="lab", created_by="admin"), source="tests", time=T0),
        new_event(
            NodeRegistered(node="n1", cluster="c", pool="p", gpus=4, gpu_type="H100"),
            source="tests",
            time=T0,
        ),
    )
    app = create_app(
        view,
        InMemoryPublisher(InMemoryBroker()),
        default_tokens(),
        clock=T0.timestamp,
        read_your_writes_s=0.05,  # the view does not read the log back: answers are 202
    )
    install_security_headers(app)
    return app


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(_app()) as client:
        yield client


def _signed_in(client: TestClient, token: str = "admin-token") -> None:
    response = client.post("/dashboard/session", json={"token": token})
    assert response.status_code == 200, response.text


# -- the session cookie -----------------------------------------------------------------------
def test_sign_in_sets_an_httponly_samesite_strict_cookie(client: TestClient) -> None:
    assert client.get("/dashboard/session").json() == {"user": None, "admin": False}
    response = client.post("/dashboard/session", json={"token": "ana-token"})
    assert response.status_code == 200, response.text
    assert response.json() == {"user": "ana", "admin": False}
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=ana-token;")
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path", "max-age"} <= attributes
    assert "samesite=strict" in cookie.lower()
    assert "path=/" in cookie.lower()
    assert "secure" not in attributes  # plain http here; set over https (next test)
    assert response.headers["cache-control"] == "no-store"
    assert client.get("/dashboard/session").json() == {"user": "ana", "admin": False}


def test_the_cookie_is_secure_over_https() -> None:
    with TestClient(_app(), base_url="https://testserver") as client:
        cookie = client.post("/dashboard/session", json={"token": "ana-token"}).headers[
            "set-cookie"
        ]
    assert "secure" in {part.strip().lower() for part in cookie.split(";")}


def test_a_cookie_authorises_reads(client: TestClient) -> None:
    for path in ("/budgets", "/nodes", "/me", "/dashboard/api/preemptions"):
        assert client.get(path).status_code == 401, path
    _signed_in(client, "chen-token")
    for path in ("/budgets", "/nodes", "/queue", "/dashboard/api/preemptions"):
        assert client.get(path).status_code == 200, path
    assert client.get("/me").json()["user"] == "chen"


def test_a_cookie_never_authorises_a_write(client: TestClient) -> None:
    """The browser attaches the cookie to any request by itself; writes need the header, so
    no page can make a signed-in browser write (CSRF)."""
    _signed_in(client)
    refused = client.post("/nodes/n1/cordon", json={"reason": "by cookie"})
    assert refused.status_code == 401, refused.text
    assert "missing bearer token" in refused.json()["detail"]
    assert client.put("/budgets/lab/weight", json={"weight": 3.0}).status_code == 401
    assert client.post("/nodes/n1/cordon", json={}, headers=ADMIN).status_code == 202


def test_an_unknown_token_signs_nobody_in(client: TestClient) -> None:
    response = client.post("/dashboard/session", json={"token": "nope-nope-nope"})
    assert response.status_code == 401
    assert "set-cookie" not in response.headers
    assert client.get("/budgets").status_code == 401
    client.cookies.set(SESSION_COOKIE, "forged-cookie-value")
    assert client.get("/budgets").status_code == 401


@pytest.mark.parametrize(
    ("headers", "content"),
    [
        ({"Content-Type": "application/x-www-form-urlencoded"}, "token=admin-token"),
        ({"Content-Type": "text/plain"}, '{"token": "admin-token"}'),
        ({"Content-Type": "multipart/form-data; boundary=x"}, "--x--"),
        ({}, '{"token": "admin-token"}'),
    ],
)
def test_sign_in_takes_json_only(client: TestClient, headers: dict[str, str], content: str) -> None:
    """What a form of another site can send without asking is refused (login CSRF)."""
    response = client.post("/dashboard/session", content=content, headers=headers)
    assert response.status_code == 415, response.text
    assert "set-cookie" not in response.headers


def test_sign_out_forgets_the_cookie(client: TestClient) -> None:
    _signed_in(client)
    assert client.get("/budgets").status_code == 200
    response = client.delete("/dashboard/session")
    assert response.status_code == 204
    assert f'{SESSION_COOKIE}=""' in response.headers["set-cookie"]
    assert "max-age=0" in response.headers["set-cookie"].lower()
    assert client.get("/budgets").status_code == 401
    assert client.get("/dashboard/session").json()["user"] is None


def test_the_app_refuses_a_table_of_tokens_in_clear() -> None:
    """A plain dict {token: principal} would be looked up in clear: a loud 500, not a bypass."""
    from services.api.auth import Principal

    view = LiveView()
    clear = {"admin-token": Principal("admin", True)}
    app = create_app(view, InMemoryPublisher(InMemoryBroker()), clear)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/budgets", headers=ADMIN).status_code == 500


# -- no token in a URL ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path", ["/?token=admin-token", "/dashboard?token=admin-token", "/?pool=a&access_token=x"]
)
def test_a_token_in_the_url_is_refused_and_never_passed_on(client: TestClient, path: str) -> None:
    response = client.get(path, follow_redirects=False)
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "set-cookie" not in response.headers
    assert "sign in" in response.text


def test_the_root_redirect_keeps_other_parameters(client: TestClient) -> None:
    response = client.get("/?refresh=2&pool=a100", follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"] == "/dashboard?refresh=2&pool=a100"
    assert client.get("/dashboard").status_code == 200


def test_the_access_log_never_shows_a_token() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/dashboard?refresh=1&token=admin-token&x=1", "1.1", 400),
        None,
    )  # fmt: skip
    assert RedactTokenQuery().filter(record)
    line = record.getMessage()
    assert "admin-token" not in line
    assert "/dashboard?refresh=1&token=[redacted]&x=1" in line


def test_the_page_has_no_inline_script_or_style_and_keeps_no_token() -> None:
    page = (STATIC / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page), "inline script"
    assert "<style" not in page
    assert not re.search(r"\sstyle=", page)
    assert not re.search(r"\son[a-z]+=", page), "inline event handler"
    script = (STATIC / "app.js").read_text()
    assert "style=" not in script  # markup it builds is subject to the policy too
    assert 'params.get("token")' not in script
    assert 'setItem("fairshare.token"' not in script
    assert "sessionStorage" not in script
    assert "Authorization" not in script  # the cookie, never a token the script holds


# -- security headers -------------------------------------------------------------------------
def test_every_answer_carries_the_security_headers(client: TestClient) -> None:
    answers = [
        client.get("/health"),
        client.get("/budgets"),  # 401
        client.get("/budgets", headers=ADMIN),
        client.get("/nodes/zz", headers=ADMIN),  # 404
        client.get("/nowhere"),
        client.post("/workloads", json={"x": 1}, headers=ADMIN),  # 422
        client.get("/dashboard"),
        client.get("/dashboard/static/app.js"),
        client.get("/", follow_redirects=False),
        client.get("/?token=x"),
        client.get("/openapi.json"),
        client.post("/dashboard/session", json={"token": "admin-token"}),
    ]
    for response in answers:
        where = f"{response.request.method} {response.request.url}: {response.status_code}"
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, where
        assert response.headers["referrer-policy"] == "no-referrer", where
        assert response.headers["x-content-type-options"] == "nosniff", where
        assert response.headers["x-frame-options"] == "DENY", where
    assert "default-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe" not in CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY


def test_the_swagger_page_allows_exactly_its_own_inline_script(client: TestClient) -> None:
    response = client.get("/docs")
    assert response.status_code == 200
    policy = response.headers["content-security-policy"]
    scripts = re.findall(r"<script>(.*?)</script>", response.text, re.DOTALL)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    [script_src] = [d for d in policy.split("; ") if d.startswith("script-src ")]
    assert script_src == f"script-src 'self' 'sha256-{digest}'"
    assert "unsafe" not in policy
    assert "http" not in policy, "no other origin: the page works offline"
    assert response.headers["referrer-policy"] == "no-referrer"


def test_the_docs_pages_load_nothing_from_another_origin(client: TestClient) -> None:
    """/docs and /redoc were FastAPI's pages over a CDN: blank offline, and /redoc a 404 (its
    CDN not allowed). Their scripts and styles are the API's own now."""
    for path in ("/docs", "/redoc"):
        page = client.get(path)
        assert page.status_code == 200, path
        for url in re.findall(r'(?:src|href)="([^"]+)"', page.text):
            assert url.startswith("/"), (path, url)
            assert client.get(url).status_code == 200, (path, url)
    redoc = client.get("/redoc").headers["content-security-policy"]
    assert "script-src 'self';" in redoc
    assert "style-src 'self' 'unsafe-inline'" in redoc
    assert "http" not in redoc
    bundle = client.get("/docs-assets/swagger-ui-bundle.js")
    assert bundle.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert "SwaggerUIBundle" in bundle.text


def test_installing_twice_adds_the_headers_once() -> None:
    app = _app()
    middleware = len(app.user_middleware)
    install_security_headers(app)
    assert len(app.user_middleware) == middleware
    with TestClient(app) as client:
        assert client.get("/health").headers.get_list("content-security-policy") == [
            CONTENT_SECURITY_POLICY
        ]

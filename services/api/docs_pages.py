"""The API's own documentation pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served
with their scripts and styles from the API itself.

FastAPI's pages load Swagger UI and ReDoc from a CDN: on a machine without the internet (a
cluster's login node, an air-gapped site) ``/docs`` was blank, and ReDoc's CDN was not allowed
by the API's content security policy at all (``/redoc`` was a 404). The scripts come from
the ``fastapi-offline`` package (the upstream bundles, MIT), mounted under
:data:`ASSETS`; the pages are FastAPI's own, pointed there. ``security.py`` gives each page
the policy it needs from the API's origin alone.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

#: Where the bundles are served.
ASSETS = "/docs-assets"
DOCS = "/docs"
REDOC = "/redoc"
_STATIC = Path(fastapi_offline.__file__).resolve().parent / "static"


def serve_docs(app: FastAPI) -> None:
    """``/docs``, ``/redoc`` and their assets on ``app`` (public, like ``/openapi.json``)."""
    app.mount(ASSETS, StaticFiles(directory=_STATIC), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    title = app.title

    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )

    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS}/favicon.png",
            with_google_fonts=False,
        )

    app.add_api_route(DOCS, swagger_ui, include_in_schema=False)
    app.add_api_route(REDOC, redoc, include_in_schema=False)

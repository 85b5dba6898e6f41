"""The dashboard page: static assets only (HTML, script, style, vendored Chart.js).

The API serves them and the page's data routes (``services.api.routes.dashboard``); this
package holds no code that imports the API, so the dependency runs one way."""

from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"

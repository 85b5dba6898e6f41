"""The dashboard: a static page served by the API and its read-only endpoints."""

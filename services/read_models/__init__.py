"""SQL read models (SQLAlchemy 2: SQLite by default, PostgreSQL by URL): the tables and the
Alembic migrations that create them. Written by the projector, read by reports and the audit."""

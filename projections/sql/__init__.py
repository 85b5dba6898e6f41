"""SQL read models (SQLAlchemy 2: SQLite by default, PostgreSQL by URL), created by Alembic
migrations and written by the projector, which stores its log position in the same
transaction as the rows it writes."""

"""Each job array's fact as the log states it (``job_arrays``), so that ``GET /arrays/{id}``
answers an array whose every element the API's view has forgotten (it answered 404), as
``GET /workloads/{id}`` answers a forgotten workload.

Arrays projected before this migration have no row: their elements' rows lack the throttle
(``max_running``) and the spec (the name), and a row made up from them would state a throttle
it does not know. Such an array is answered once the read models are projected again from the
log.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_arrays",
        sa.Column("array_id", sa.String(256), primary_key=True),
        sa.Column("budget", sa.String(512), nullable=False, index=True),
        sa.Column("submitted_at", sa.BigInteger, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_arrays")

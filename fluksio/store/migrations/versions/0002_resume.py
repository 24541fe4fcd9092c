"""Resume: how often a run was resumed, from what state and when.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resume_count", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("resumed_from", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("resumed_at")
        batch_op.drop_column("resumed_from")
        batch_op.drop_column("resume_count")

"""Run drives: the machine that drives a run and since when, and the earlier drives of a resumed run.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("driver", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("drive_started_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "run_drives",
        sa.Column("run_id", sa.String(length=26), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("driver", sa.String(length=200), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_lease_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_as", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "epoch"),
    )


def downgrade() -> None:
    op.drop_table("run_drives")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("drive_started_at")
        batch_op.drop_column("driver")

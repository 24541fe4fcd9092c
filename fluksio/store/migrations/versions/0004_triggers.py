"""Triggers: the schedules every beat reads, and the log of alerts sent and failed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("flow", sa.String(length=200), nullable=False),
        sa.Column("flow_ref", sa.String(length=1000), nullable=True),
        sa.Column("cron", sa.String(length=200), nullable=True),
        sa.Column("tz", sa.String(length=64), nullable=True),
        sa.Column("every_s", sa.BigInteger(), nullable=True),
        sa.Column("params", JSON, nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("catchup", sa.String(length=8), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_tick", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "alert_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("rule", sa.String(length=100), nullable=False),
        sa.Column("run_id", sa.String(length=26), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("target", sa.String(length=1000), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("alert_log", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alert_log_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_alert_log_rule"), ["rule"], unique=False)
        batch_op.create_index(batch_op.f("ix_alert_log_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("alert_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_alert_log_run_id"))
        batch_op.drop_index(batch_op.f("ix_alert_log_rule"))
        batch_op.drop_index(batch_op.f("ix_alert_log_created_at"))
    op.drop_table("alert_log")
    op.drop_table("schedules")

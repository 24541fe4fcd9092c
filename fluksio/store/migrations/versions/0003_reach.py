"""Reach: mapped elements, subflow children, priorities, schedules, granted resources, codecs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("priority", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("parent_id", sa.String(length=26), nullable=True))
        batch_op.add_column(sa.Column("parent_node", sa.String(length=220), nullable=True))
        batch_op.add_column(sa.Column("park_state", sa.String(length=8), nullable=True))
        batch_op.add_column(sa.Column("schedule", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("schedule_tick", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_runs_parent_id"), ["parent_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_schedule"), ["schedule"], unique=False)
    with op.batch_alter_table("run_nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("element", sa.Integer(), nullable=False, server_default="-1"))
        batch_op.add_column(sa.Column("granted", JSON, nullable=True))
        batch_op.add_column(sa.Column("child_run", sa.String(length=26), nullable=True))
        batch_op.add_column(sa.Column("cached_element", sa.Integer(), nullable=True))
        batch_op.drop_constraint("uq_run_nodes_attempt", type_="unique")
        batch_op.create_unique_constraint("uq_run_nodes_attempt", ["run_id", "node", "element", "attempt"])
    with op.batch_alter_table("run_artifacts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("element", sa.Integer(), nullable=False, server_default="-1"))
        batch_op.add_column(sa.Column("codec", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_artifacts", schema=None) as batch_op:
        batch_op.drop_column("codec")
        batch_op.drop_column("element")
    with op.batch_alter_table("run_nodes", schema=None) as batch_op:
        batch_op.drop_constraint("uq_run_nodes_attempt", type_="unique")
        batch_op.create_unique_constraint("uq_run_nodes_attempt", ["run_id", "node", "attempt"])
        batch_op.drop_column("cached_element")
        batch_op.drop_column("child_run")
        batch_op.drop_column("granted")
        batch_op.drop_column("element")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_schedule"))
        batch_op.drop_index(batch_op.f("ix_runs_parent_id"))
        batch_op.drop_column("schedule_tick")
        batch_op.drop_column("schedule")
        batch_op.drop_column("park_state")
        batch_op.drop_column("parent_node")
        batch_op.drop_column("parent_id")
        batch_op.drop_column("priority")

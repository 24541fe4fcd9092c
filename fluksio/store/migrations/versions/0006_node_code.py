"""Node code: the code identity a node call was keyed on in the run cache, and why it was not restored from
it; node rows indexed by node, so that the newest earlier call of a node is found at once.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-10
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run_nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node_code", sa.String(length=80), nullable=True))
        batch_op.add_column(sa.Column("cache_miss", sa.Text(), nullable=True))
        batch_op.create_index(batch_op.f("ix_run_nodes_node"), ["node"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("run_nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_nodes_node"))
        batch_op.drop_column("cache_miss")
        batch_op.drop_column("node_code")

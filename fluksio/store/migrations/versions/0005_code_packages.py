"""Code packages: what a run imports from its code package, the submitter's signature over it, and the
digest of the graph described as data (which a driver that never imports the code walks).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("code_entry", sa.String(length=1000), nullable=True))
        batch_op.add_column(sa.Column("code_signature", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("graph_digest", sa.String(length=80), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("graph_digest")
        batch_op.drop_column("code_signature")
        batch_op.drop_column("code_entry")

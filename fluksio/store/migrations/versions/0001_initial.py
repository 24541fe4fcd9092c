"""Initial schema: runs, their node rows, metric series and artifacts.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('runs',
    sa.Column('id', sa.String(length=26), nullable=False),
    sa.Column('flow', sa.String(length=200), nullable=False),
    sa.Column('flow_ref', sa.String(length=1000), nullable=True),
    sa.Column('flow_version', sa.String(length=64), nullable=True),
    sa.Column('code_digest', sa.String(length=80), nullable=True),
    sa.Column('params', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('params_digest', sa.String(length=80), nullable=False),
    sa.Column('seed', sa.BigInteger(), nullable=True),
    sa.Column('group_id', sa.String(length=64), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=True),
    sa.Column('result', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('lease_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('engine', sa.String(length=32), nullable=False),
    sa.Column('idempotency_key', sa.String(length=200), nullable=True),
    sa.Column('duration_ms', sa.BigInteger(), nullable=True),
    sa.Column('no_cache', sa.Boolean(), nullable=False),
    sa.Column('cancel_requested', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('idempotency_key')
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_flow'), ['flow'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_group_id'), ['group_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_status'), ['status'], unique=False)
        batch_op.create_index('ix_runs_status_lease', ['status', 'lease_at'], unique=False)

    op.create_table('run_artifacts',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=26), nullable=False),
    sa.Column('node', sa.String(length=200), nullable=False),
    sa.Column('message', sa.String(length=200), nullable=False),
    sa.Column('digest', sa.String(length=80), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('media_type', sa.String(length=200), nullable=False),
    sa.Column('name', sa.String(length=500), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('run_artifacts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_run_artifacts_digest'), ['digest'], unique=False)
        batch_op.create_index(batch_op.f('ix_run_artifacts_run_id'), ['run_id'], unique=False)

    op.create_table('run_metrics',
    sa.Column('run_id', sa.String(length=26), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('step', sa.BigInteger(), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'name', 'step')
    )
    op.create_table('run_nodes',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=26), nullable=False),
    sa.Column('node', sa.String(length=200), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('machine', sa.String(length=200), nullable=True),
    sa.Column('gpus', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('duration_ms', sa.BigInteger(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('logs', sa.Text(), nullable=True),
    sa.Column('cache_key', sa.String(length=80), nullable=True),
    sa.Column('outputs', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('cached_from', sa.String(length=26), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'node', 'attempt', name='uq_run_nodes_attempt')
    )
    with op.batch_alter_table('run_nodes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_run_nodes_cache_key'), ['cache_key'], unique=False)
        batch_op.create_index(batch_op.f('ix_run_nodes_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('run_nodes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_run_nodes_run_id'))
        batch_op.drop_index(batch_op.f('ix_run_nodes_cache_key'))

    op.drop_table('run_nodes')
    op.drop_table('run_metrics')
    with op.batch_alter_table('run_artifacts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_run_artifacts_run_id'))
        batch_op.drop_index(batch_op.f('ix_run_artifacts_digest'))

    op.drop_table('run_artifacts')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_status_lease')
        batch_op.drop_index(batch_op.f('ix_runs_status'))
        batch_op.drop_index(batch_op.f('ix_runs_group_id'))
        batch_op.drop_index(batch_op.f('ix_runs_flow'))

    op.drop_table('runs')

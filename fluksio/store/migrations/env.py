"""Alembic environment: run migrations on the connection fluksio hands over (or the configured URL)."""

from alembic import context
from sqlalchemy import create_engine

from fluksio.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if url is None:  # Database.alembic_config always sets it
        raise RuntimeError("alembic: no sqlalchemy.url in the configuration")
    engine = create_engine(url)
    with engine.begin() as connection:
        _run(connection)


def _run(connection) -> None:
    # render_as_batch: SQLite cannot ALTER most things, so later migrations rebuild tables.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

"""The run store: SQL tables, sessions, status transitions and the queries every layer uses."""

from fluksio.store.db import Database

__all__ = ["Database"]

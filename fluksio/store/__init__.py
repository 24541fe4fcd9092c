"""The run store: SQL tables, sessions, status transitions and the queries every layer uses.

``store.rows`` alone imports no SQLAlchemy: the plain rows the driver makes before they are written.
"""

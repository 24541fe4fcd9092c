"""PostgreSQL's TLS settings are the URL's own (``sslmode=verify-full&sslrootcert=…``): they reach libpq as
they are written."""

from __future__ import annotations

from fluksio.store.db import Database


def test_sslmode_and_its_certificates_pass_through_to_the_driver() -> None:
    url = ("postgresql+psycopg://fluksio@db.lab:5432/fluksio?sslmode=verify-full&sslrootcert=/etc/pg/ca.pem"
           "&sslcert=/etc/pg/client.pem&sslkey=/etc/pg/client.key")
    database = Database(url)
    _, options = database.engine.dialect.create_connect_args(database.engine.url)
    assert {key: options[key] for key in ("sslmode", "sslrootcert", "sslcert", "sslkey")} == {
        "sslmode": "verify-full", "sslrootcert": "/etc/pg/ca.pem", "sslcert": "/etc/pg/client.pem",
        "sslkey": "/etc/pg/client.key"}
    database.dispose()

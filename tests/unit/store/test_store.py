"""The run store on a SQLite file: schema, status transitions, lookups, idempotency and metrics."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, inspect, select

from fluksio.clock import utcnow
from fluksio.errors import ConfigError, RunNotFound
from fluksio.schemas import RunStatus
from fluksio.store.db import Database
from fluksio.store.ids import new_run_id
from fluksio.store.metrics import read_metrics, upsert_metrics
from fluksio.store.models import Base, Run, RunArtifact, RunNode
from fluksio.store.nodes import NodeRow, artifact_values, artifacts_of, node_values, record_nodes
from fluksio.store.run_rows import (
    claim,
    finish,
    get_run,
    insert_run,
    load_record,
    node_rows,
    refresh_lease,
    request_cancel,
    run_status,
    transition,
)
from fluksio.store.status import TRANSITIONS, allowed_from
from tests.unit.store.runs import new_run


def status_of(db: Database, run_id: str) -> str:
    return get_run(db, run_id).status


# -- schema ------------------------------------------------------------------------------------------


def alembic_head(database: Database) -> str | None:
    """The newest revision of the migrations, as Alembic itself finds it among their files."""
    return ScriptDirectory.from_config(database.alembic_config()).get_current_head()


def test_upgrade_creates_the_tables(tmp_path):
    database = Database(f"sqlite:///{tmp_path / 'nested' / 'dir' / 'runs.db'}")  # parent folders are made
    assert database.current_revision() is None
    database.upgrade()
    tables = set(inspect(database.engine).get_table_names())
    assert {"runs", "run_nodes", "run_metrics", "run_artifacts", "alembic_version"} <= tables
    assert database.current_revision() == alembic_head(database) is not None
    database.dispose()


def test_upgrade_is_idempotent(db):
    head = db.current_revision()
    db.upgrade()
    db.upgrade()
    assert db.current_revision() == head
    run = new_run(db)
    db.upgrade()
    assert get_run(db, run.id).id == run.id  # data untouched


def test_the_migrations_match_the_models(db):
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_a_bad_database_url_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="'not a url' is not a SQLAlchemy URL"):
        Database("not a url")


def test_a_mistyped_database_url_does_not_leak_its_password():
    with pytest.raises(ConfigError) as info:
        Database("postgresql//fluksio:hunter2@db/runs")
    assert "hunter2" not in str(info.value)


# -- claim and transitions ---------------------------------------------------------------------------


def test_claim_is_a_compare_and_swap(db):
    run = new_run(db)
    assert claim(db, run.id, "sha256:code") == 0  # the epoch of a run never resumed
    assert claim(db, run.id, "sha256:other") is None
    stored = get_run(db, run.id)
    assert stored.status == "running"
    assert stored.code_digest == "sha256:code"  # the second claimer changed nothing
    assert stored.started_at is not None and stored.lease_at is not None


def test_claim_of_an_unknown_run_is_refused(db):
    assert claim(db, "01NOSUCHRUN000000000000000", None) is None


def test_transition_table_refuses_ok_to_running(db):
    run = new_run(db)
    assert claim(db, run.id, None) == 0
    assert transition(db, run.id, RunStatus.OK) is True
    assert transition(db, run.id, RunStatus.RUNNING) is False
    assert status_of(db, run.id) == "ok"


@pytest.mark.parametrize("terminal", [RunStatus.OK, RunStatus.ERROR, RunStatus.CANCELLED, RunStatus.ABANDONED])
def test_terminal_statuses_move_only_back_to_queued_by_resume_and_ok_never(db, terminal):
    run = new_run(db)
    claim(db, run.id, None)
    assert transition(db, run.id, terminal) is True
    for target in RunStatus:
        if target is not RunStatus.QUEUED:
            assert transition(db, run.id, target) is False
    assert status_of(db, run.id) == terminal.value
    assert transition(db, run.id, RunStatus.QUEUED) is (terminal is not RunStatus.OK)


def test_queued_cannot_jump_to_ok(db):
    run = new_run(db)
    assert transition(db, run.id, RunStatus.OK) is False
    assert status_of(db, run.id) == "queued"


def test_the_transition_table():
    assert TRANSITIONS[RunStatus.QUEUED] == {RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.ERROR}
    assert sorted(allowed_from(RunStatus.RUNNING)) == ["queued"]
    assert sorted(allowed_from(RunStatus.CANCELLED)) == ["queued", "running"]
    assert sorted(allowed_from(RunStatus.QUEUED)) == ["abandoned", "cancelled", "error"]
    assert all(TRANSITIONS[s] <= {RunStatus.QUEUED} for s in RunStatus if s.is_terminal())
    assert not TRANSITIONS[RunStatus.OK]


def test_finish_records_result_reason_and_duration(db):
    run = new_run(db)
    claim(db, run.id, None)
    assert finish(db, run.id, RunStatus.OK, None, {"y": 2}) is True
    stored = get_run(db, run.id)
    assert stored.status == "ok"
    assert stored.result == {"y": 2}
    assert stored.finished_at is not None and stored.finished_at >= stored.started_at
    assert stored.duration_ms is not None and stored.duration_ms >= 0
    assert finish(db, run.id, RunStatus.ERROR, "late", None) is False
    assert get_run(db, run.id).result == {"y": 2}


def test_timestamps_come_back_timezone_aware(db):
    run = new_run(db)
    assert get_run(db, run.id).created_at.tzinfo is not None


# -- cancel ------------------------------------------------------------------------------------------


def test_request_cancel_on_a_queued_run_cancels_it(db):
    run = new_run(db)
    assert request_cancel(db, run.id, "user asked") is RunStatus.CANCELLED
    stored = get_run(db, run.id)
    assert stored.status == "cancelled"
    assert stored.status_reason == "user asked"
    assert stored.finished_at is not None
    assert claim(db, run.id, None) is None  # a driver arriving late never starts it


def test_request_cancel_on_a_running_run_flags_it_for_its_driver(db):
    run = new_run(db)
    claim(db, run.id, None)
    assert refresh_lease(db, run.id) == (True, False)
    assert request_cancel(db, run.id, "user asked") is RunStatus.RUNNING
    stored = get_run(db, run.id)
    assert stored.status == "running"
    assert stored.cancel_requested is True
    assert stored.status_reason == "cancelling: user asked"
    assert refresh_lease(db, run.id) == (True, True)  # the driver learns of it with its next lease refresh
    assert transition(db, run.id, RunStatus.CANCELLED) is True


def test_request_cancel_on_a_finished_run_changes_nothing(db):
    run = new_run(db)
    claim(db, run.id, None)
    finish(db, run.id, RunStatus.OK, None, {})
    assert request_cancel(db, run.id, "too late") is RunStatus.OK
    stored = get_run(db, run.id)
    assert stored.cancel_requested is False and stored.status_reason is None


def test_request_cancel_of_one_run_leaves_its_siblings_alone(db):
    runs = [new_run(db) for _ in range(3)]
    request_cancel(db, runs[1].id, "one of the sweep")
    assert [status_of(db, r.id) for r in runs] == ["queued", "cancelled", "queued"]


def test_request_cancel_of_an_unknown_run_is_not_found(db):
    with pytest.raises(RunNotFound):
        request_cancel(db, "01NOSUCHRUN000000000000000", "x")


# -- lookups -----------------------------------------------------------------------------------------


def test_get_run_by_full_id_and_unique_prefix(db):
    first = new_run(db, run_id="01AAAAAAAAAAAAAAAAAAAAAAAA")
    new_run(db, run_id="01BBBBBBBBBBBBBBBBBBBBBBBB")
    assert get_run(db, first.id).id == first.id
    assert get_run(db, "01AAAA").id == first.id
    assert get_run(db, "01aaaa").id == first.id  # ids are shown upper case; typed lower case is fine


def test_get_run_by_an_ambiguous_prefix_asks_for_more(db):
    new_run(db, run_id="01AAAAAAAAAAAAAAAAAAAAAAA1")
    new_run(db, run_id="01AAAAAAAAAAAAAAAAAAAAAAA2")
    with pytest.raises(RunNotFound, match="ambiguous; give more characters"):
        get_run(db, "01AAAA")
    assert get_run(db, "01AAAAAAAAAAAAAAAAAAAAAAA2").id.endswith("2")


def test_get_run_needs_four_characters_of_prefix(db):
    new_run(db, run_id="01AAAAAAAAAAAAAAAAAAAAAAAA")
    with pytest.raises(RunNotFound, match="no run '01A'"):
        get_run(db, "01A")


def test_get_run_unknown_id_is_not_found(db):
    new_run(db)
    with pytest.raises(RunNotFound, match="`fluksio runs` lists them"):
        get_run(db, "ZZZZZZZZ")


def test_get_run_prefix_is_matched_literally(db):
    new_run(db, run_id="01AAAAAAAAAAAAAAAAAAAAAAAA")
    with pytest.raises(RunNotFound):
        get_run(db, "____")


def test_a_new_run_row_takes_the_defaults_of_the_columns_it_was_not_given(db):
    run = new_run(db)
    stored = get_run(db, run.id)
    assert (stored.resume_count, stored.priority, stored.no_cache, stored.cancel_requested) == (0, 0, False, False)
    assert stored.params == {"lr": 0.1} and stored.status == "queued" and stored.created_at == run.created_at


def test_run_status_reads_the_status_of_an_exact_id(db):
    run = new_run(db)
    assert run_status(db, run.id) is RunStatus.QUEUED
    claim(db, run.id, "sha256:code")
    assert run_status(db, run.id) is RunStatus.RUNNING
    with pytest.raises(RunNotFound, match="fluksio runs"):
        run_status(db, run.id[:8])  # a waiting handle always holds the whole id; prefixes are get_run's


def test_load_record_finds_a_run_by_prefix_with_its_node_rows_in_order(db):
    run = new_run(db)
    claim(db, run.id, "sha256:code")
    record_nodes(db, [NodeRow(run_id=run.id, node="b", status="ok"),
                      NodeRow(run_id=run.id, node="a", status="error", error="boom")])
    record = load_record(db, run.id[:10])
    assert record.id == run.id and [(n.node, n.status.value) for n in record.nodes] == [("b", "ok"), ("a", "error")]
    with pytest.raises(RunNotFound):
        load_record(db, "ZZZZZZZZ")


def test_run_ids_are_ulids_that_sort_by_creation():
    ids = [new_run_id() for _ in range(50)]
    assert all(len(i) == 26 for i in ids)
    assert len(set(ids)) == 50
    assert set("".join(ids)) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


# -- idempotency -------------------------------------------------------------------------------------


def test_an_idempotency_key_insert_returns_the_existing_run(db):
    first = new_run(db, key="submit-42")
    retry = Run(id=new_run_id(), flow="train", params={"lr": 0.5}, params_digest="sha256:q",
                status="queued", created_at=utcnow(), engine="embedded", idempotency_key="submit-42")
    stored, created = insert_run(db, retry)
    assert created is False
    assert stored.id == first.id
    assert stored.params == {"lr": 0.1}
    with db.read() as session:
        assert len(session.scalars(select(Run)).all()) == 1


def test_runs_without_a_key_never_collide(db):
    new_run(db)
    new_run(db)
    with db.read() as session:
        assert len(session.scalars(select(Run)).all()) == 2


def test_a_duplicate_id_without_a_key_is_an_error(db):
    from sqlalchemy.exc import IntegrityError

    new_run(db, run_id="01AAAAAAAAAAAAAAAAAAAAAAAA")
    duplicate = Run(id="01AAAAAAAAAAAAAAAAAAAAAAAA", flow="train", params={}, params_digest="x", status="queued",
                    created_at=utcnow(), engine="embedded")
    with pytest.raises(IntegrityError):
        insert_run(db, duplicate)


# -- metrics -----------------------------------------------------------------------------------------


@pytest.fixture
def statements(db):
    """Every INSERT INTO run_metrics the write engine sends."""
    seen: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO RUN_METRICS"):
            seen.append(statement)

    event.listen(db.write_engine, "before_cursor_execute", before)
    yield seen
    event.remove(db.write_engine, "before_cursor_execute", before)


def test_upsert_metrics_keeps_the_last_value_per_key(db):
    run = new_run(db)
    upsert_metrics(db, [(run.id, "loss", 0, 1.0), (run.id, "loss", 1, 0.5), (run.id, "loss", 0, 0.9)])
    upsert_metrics(db, [(run.id, "loss", 1, 0.4), (run.id, "acc", 0, 0.7)])
    assert read_metrics(db, run.id) == {"acc": [(0, 0.7)], "loss": [(0, 0.9), (1, 0.4)]}


def test_upsert_metrics_keeps_the_last_value_in_a_large_batch(db):
    run = new_run(db)
    rows = [(run.id, "loss", step, float(step)) for step in range(2_500)]
    rows.append((run.id, "loss", 0, -1.0))  # the same key again, last in the batch
    upsert_metrics(db, rows)
    series = read_metrics(db, run.id)["loss"]
    assert series[0] == (0, -1.0)
    assert len(series) == 2_500


@pytest.mark.parametrize("count", [1, 1999, 2000, 2001, 4500])
def test_upsert_metrics_is_one_statement_executed_for_many_rows(db, statements, count):
    run = new_run(db)
    rows = [(run.id, "loss", step, step / 10) for step in range(count)]
    issued = upsert_metrics(db, rows)
    assert issued == 1 == len(statements)  # one executemany, not a statement per row
    series = read_metrics(db, run.id)["loss"]
    assert len(series) == count
    assert series[-1] == (count - 1, (count - 1) / 10)


def test_upsert_metrics_of_nothing_issues_nothing(db, statements):
    assert upsert_metrics(db, []) == 0
    assert statements == []


def test_read_metrics_of_a_run_without_metrics_is_empty(db):
    run = new_run(db)
    assert read_metrics(db, run.id) == {}


def test_abandon_stale_takes_only_runs_whose_lease_is_old(db):
    from datetime import timedelta

    from sqlalchemy import update

    from fluksio.clock import utcnow
    from fluksio.store.models import Run
    from fluksio.store.run_rows import abandon_stale

    old, fresh, queued = new_run(db), new_run(db), new_run(db)
    claim(db, old.id, None)
    claim(db, fresh.id, None)
    with db.write() as session:
        session.execute(update(Run).where(Run.id == old.id).values(lease_at=utcnow() - timedelta(seconds=120)))
    assert abandon_stale(db, 60) == [old.id]
    assert abandon_stale(db, 60) == []  # a second sweeper finds nothing left to take
    assert status_of(db, old.id) == "abandoned" and "lease" in get_run(db, old.id).status_reason
    assert status_of(db, fresh.id) == "running" and status_of(db, queued.id) == "queued"
    assert refresh_lease(db, old.id) == (False, False)  # its driver, if alive, learns the run is no longer its


def test_resume_requeues_a_failed_run_and_records_from_what(db):
    from fluksio.errors import RunRejected
    from fluksio.store.run_rows import resume

    run = new_run(db)
    claim(db, run.id, None)
    finish(db, run.id, RunStatus.ERROR, "node x failed", None)
    assert resume(db, run.id) is RunStatus.ERROR
    stored = get_run(db, run.id)
    assert (stored.status, stored.resumed_from, stored.resume_count) == ("queued", "error", 1)
    assert stored.finished_at is None and stored.resumed_at is not None
    with pytest.raises(RunRejected, match="is queued: nothing to resume"):
        resume(db, run.id)
    claim(db, run.id, None)
    finish(db, run.id, RunStatus.OK, None, {})
    with pytest.raises(RunRejected, match="finished ok"):
        resume(db, run.id)


def test_a_driver_that_lost_its_run_to_a_resume_can_no_longer_write_to_it(db):
    from fluksio.store.run_rows import abandon_stale, resume, set_reason

    run = new_run(db)
    old_epoch = claim(db, run.id, None)
    from datetime import timedelta

    from sqlalchemy import update

    from fluksio.clock import utcnow
    from fluksio.store.models import Run

    with db.write() as session:
        session.execute(update(Run).where(Run.id == run.id).values(lease_at=utcnow() - timedelta(minutes=5)))
    assert abandon_stale(db, 60) == [run.id]
    resume(db, run.id)
    new_epoch = claim(db, run.id, None)
    assert (old_epoch, new_epoch) == (0, 1)
    assert refresh_lease(db, run.id, old_epoch) == (False, False)  # the old driver learns it lost the run
    set_reason(db, run.id, "stale words", old_epoch)
    assert finish(db, run.id, RunStatus.ERROR, "the old driver's verdict", None, old_epoch) is False
    assert get_run(db, run.id).status == "running" and get_run(db, run.id).status_reason is None
    assert finish(db, run.id, RunStatus.OK, None, {}, new_epoch) is True


def test_stale_queued_runs_are_found_once(db):
    from datetime import timedelta

    from sqlalchemy import update

    from fluksio.clock import utcnow
    from fluksio.store.models import Run
    from fluksio.store.run_rows import stale_queued, touch_queued

    lost, held, _fresh, foreign = new_run(db), new_run(db), new_run(db), new_run(db, flow="elsewhere")
    with db.write() as session:
        session.execute(update(Run).where(Run.id.in_([lost.id, held.id, foreign.id]))
                        .values(created_at=utcnow() - timedelta(minutes=5)))
    touch_queued(db, held.id)  # a driver waiting for a label holds it
    assert stale_queued(db, 60, ["train"]) == [(lost.id, "train")]
    assert stale_queued(db, 60, ["train"]) == []  # handled: a second sweeper does not send it again
    # A run of a flow the caller cannot drive is left unmarked for a process that can.
    assert stale_queued(db, 60, ["elsewhere"]) == [(foreign.id, "elsewhere")]


def age_lease(db, run_id: str, seconds: float) -> None:
    from datetime import timedelta

    from sqlalchemy import update

    with db.write() as session:
        session.execute(update(Run).where(Run.id == run_id).values(lease_at=utcnow() - timedelta(seconds=seconds)))


def test_requeue_stale_resumes_stale_runs_of_the_given_flows_without_abandoning_them(db):
    from fluksio.store.run_rows import abandon_stale, requeue_stale

    mine, foreign, cancelling, fresh = (new_run(db), new_run(db, flow="elsewhere"), new_run(db), new_run(db))
    for run in (mine, foreign, cancelling, fresh):
        claim(db, run.id, None)
    request_cancel(db, cancelling.id, "asked by a test")
    for run in (mine, foreign, cancelling):
        age_lease(db, run.id, 120)
    assert requeue_stale(db, 60, ["train"]) == [(mine.id, "train")]
    assert requeue_stale(db, 60, ["train"]) == []  # a second sweeper finds nothing left to take
    stored = get_run(db, mine.id)
    assert (stored.status, stored.resumed_from, stored.resume_count) == ("queued", "abandoned", 1)
    assert stored.status_reason.startswith("resumed automatically: its driver stopped refreshing the lease")
    assert stored.lease_at is not None and stored.finished_at is None
    # The other flow's run and the one being cancelled are left to abandon_stale; the fresh one runs on.
    assert sorted(abandon_stale(db, 60)) == sorted([foreign.id, cancelling.id])
    assert status_of(db, fresh.id) == "running"
    assert claim(db, mine.id, None) == 1  # the next driver claims it in the next epoch


def test_requeue_handed_over_needs_the_drivers_epoch(db):
    from fluksio.store.run_rows import requeue_handed_over

    run = new_run(db)
    epoch = claim(db, run.id, None)
    assert requeue_handed_over(db, run.id, epoch + 1, "shut down") is False  # not that driver's run
    assert requeue_handed_over(db, run.id, epoch, "shut down") is True
    stored = get_run(db, run.id)
    assert (stored.status, stored.resumed_from, stored.resume_count) == ("queued", "abandoned", 1)
    assert stored.status_reason == "resumed automatically: shut down"
    assert requeue_handed_over(db, run.id, epoch, "shut down") is False  # queued now: nothing to hand over


def test_the_head_revision_constant_is_alembics_head(db):
    from fluksio.store.db import HEAD_REVISION

    assert alembic_head(db) == HEAD_REVISION == db.current_revision()


# -- node rows ---------------------------------------------------------------------------------------


def node_row(run_id: str, node: str, attempt: int = 1, **values) -> RunNode:
    return RunNode(run_id=run_id, node=node, attempt=attempt, status=values.pop("status", "ok"), **values)


@pytest.fixture
def commits(db):
    """Every transaction the write engine commits."""
    seen: list[object] = []

    def committed(connection):
        seen.append(connection)

    event.listen(db.write_engine, "commit", committed)
    yield seen
    event.remove(db.write_engine, "commit", committed)


def test_record_nodes_writes_rows_and_artifacts_in_one_transaction(db, commits):
    run = new_run(db)
    commits.clear()
    record_nodes(db, [node_row(run.id, f"n{i}", outputs={"m": i}) for i in range(50)],
                 [RunArtifact(run_id=run.id, node="n3", message="m", digest="sha256:" + "a" * 64, size=3,
                              media_type="application/octet-stream", name="m.bin")])
    assert len(commits) == 1
    rows = node_rows(db, run.id)
    assert sorted(r.node for r in rows) == sorted(f"n{i}" for i in range(50))
    assert {r.node: r.outputs for r in rows}["n7"] == {"m": 7}
    assert [(a.node, a.name, a.size) for a in artifacts_of(db, run.id)] == [("n3", "m.bin", 3)]


def test_record_nodes_fills_in_the_model_defaults(db):
    run = new_run(db)
    record_nodes(db, [RunNode(run_id=run.id, node="n", status="cached")])  # no attempt, no gpus
    (row,) = node_rows(db, run.id)
    assert (row.attempt, row.gpus) == (1, [])


def test_node_values_names_every_column_but_the_id():
    # A column added to the model but not here would silently never be written.
    columns = {c.key for c in RunNode.__table__.columns if not c.primary_key}
    assert set(node_values(RunNode(run_id="r", node="n", status="ok"))) == columns
    artifact_columns = {c.key for c in RunArtifact.__table__.columns if not c.primary_key}
    assert set(artifact_values(RunArtifact(run_id="r", node="n", message="m", digest="d", size=1,
                                           media_type="t"))) == artifact_columns


def test_a_retried_node_write_whose_commit_went_through_keeps_the_first_row(db):
    # The answer to a COMMIT can be lost in an outage: @retried then writes the same rows again,
    # and that must neither fail (it would abort the run) nor duplicate them.
    run = new_run(db)
    record_nodes(db, [node_row(run.id, "a", outputs={"x": 1}), node_row(run.id, "b")])
    record_nodes(db, [node_row(run.id, "a", outputs={"x": 2}), node_row(run.id, "b")])
    rows = node_rows(db, run.id)
    assert sorted((r.node, r.attempt) for r in rows) == [("a", 1), ("b", 1)]
    assert {r.node: r.outputs for r in rows}["a"] == {"x": 1}


def test_another_attempt_of_a_node_is_a_row_of_its_own(db):
    run = new_run(db)
    record_nodes(db, [node_row(run.id, "a", status="error", error="boom")])
    record_nodes(db, [node_row(run.id, "a", attempt=2)])
    assert sorted((r.attempt, r.status) for r in node_rows(db, run.id)) == [(1, "error"), (2, "ok")]


def test_record_nodes_of_nothing_opens_no_transaction(db, commits):
    record_nodes(db, [])
    assert commits == []


def test_a_retried_node_write_does_not_list_its_artifacts_twice(db):
    run = new_run(db)

    def write() -> None:
        record_nodes(db, [node_row(run.id, "a", outputs={"m": {"$artifact": 1}})],
                     [RunArtifact(run_id=run.id, node="a", message="m", digest="sha256:" + "b" * 64, size=1,
                                  media_type="application/octet-stream")])

    write()
    write()  # the same write again, as @retried sends it when a commit's answer was lost
    assert len(artifacts_of(db, run.id)) == 1
    assert len(node_rows(db, run.id)) == 1


def test_the_plain_rows_have_the_models_columns():
    # A column added to a model but not to its plain row could never be written by a driver.
    from dataclasses import fields

    from fluksio.store.nodes import ArtifactRow, NodeRow

    assert {f.name for f in fields(NodeRow)} == {c.key for c in RunNode.__table__.columns if not c.primary_key}
    assert {f.name for f in fields(ArtifactRow)} == {c.key for c in RunArtifact.__table__.columns
                                                     if not c.primary_key}


def test_a_writer_waits_for_another_writers_transaction_and_then_writes(db):
    import threading
    import time

    from sqlalchemy import text

    holder_started, release = threading.Event(), threading.Event()

    def hold_the_write_lock():
        with db.write() as session:
            session.execute(text("SELECT 1"))  # BEGIN IMMEDIATE has run: the write lock is held
            holder_started.set()
            release.wait(5)

    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    assert holder_started.wait(5)
    threading.Timer(0.2, release.set).start()
    started = time.monotonic()
    run = new_run(db)  # waits for the holder, in short steps, instead of failing
    waited = time.monotonic() - started
    holder.join(5)
    assert status_of(db, run.id) == "queued"
    assert waited >= 0.15  # it did wait for the other writer


def test_a_writer_gives_up_after_the_busy_limit_with_sqlites_error(db, monkeypatch):
    import sqlite3
    import threading
    import time

    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    import fluksio.store.db as store_db

    monkeypatch.setattr(store_db, "SQLITE_BUSY_TIMEOUT_MS", 100)
    began_on: list = []  # the sqlite3 connection of each BEGIN
    real_begin = store_db._begin_immediate

    def begin(connection):
        began_on.append(connection.connection.driver_connection)
        return real_begin(connection)

    monkeypatch.setattr(store_db, "_begin_immediate", begin)
    holder_started, release = threading.Event(), threading.Event()

    def hold_the_write_lock():
        with db.write() as session:
            session.execute(text("SELECT 1"))
            holder_started.set()
            release.wait(5)

    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    try:
        assert holder_started.wait(5)
        started = time.monotonic()
        with pytest.raises(OperationalError) as failed, db.write() as session:
            session.execute(text("SELECT 1"))
        assert time.monotonic() - started < 5  # the limit, not the limit twice nor SQLite's 30 s
        assert isinstance(failed.value.orig, sqlite3.OperationalError) and "locked" in str(failed.value.orig)
        # A write connection waits for the lock in fluksio's own steps, never in SQLite's busy handler.
        assert began_on[-1].execute("PRAGMA busy_timeout").fetchone()[0] == 0
    finally:
        release.set()
        holder.join(5)


def test_a_write_on_a_connection_whose_sqlite_handle_was_closed_goes_through_on_a_new_one(db, monkeypatch):
    import fluksio.store.db as store_db

    began_on: list = []
    real_begin = store_db._begin_immediate

    def begin(connection):
        began_on.append(connection.connection.driver_connection)
        return real_begin(connection)

    monkeypatch.setattr(store_db, "_begin_immediate", begin)
    new_run(db)
    began_on[-1].close()  # underneath SQLAlchemy: the pool still holds it
    run = new_run(db)  # SQLAlchemy sees the closed handle, drops it; the store's retry takes a new one
    assert status_of(db, run.id) == "queued" and began_on[-1] is not began_on[0]


def test_a_run_resumed_by_hand_is_not_taken_for_a_lost_hand_over(db):
    from fluksio.store.run_rows import abandon_stale, resume, stale_queued

    run = new_run(db)
    claim(db, run.id, None)
    age_lease(db, run.id, 600)  # its driver died ten minutes ago
    assert abandon_stale(db, 60) == [run.id]
    resume(db, run.id)
    # Its queue time counts from the resume: the sweepers do not send it to a driver a second time.
    assert stale_queued(db, 60, ["train"]) == []

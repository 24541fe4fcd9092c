"""`fluksio runs` laid out for the terminal's width: what stays readable at 80 columns, what wider ones add."""

from __future__ import annotations

from datetime import datetime, timezone

from rich.console import Console

from fluksio.cli.render import runs_table, short_ids
from fluksio.schemas import RunRecord, RunStatus

CREATED = datetime(2025, 3, 14, 9, 26, 53, tzinfo=timezone.utc)
# A sweep's ids: same millisecond, so they share their first ten characters.
IDS = ["01JPA3QY7K8ZX4W2M9N6B5C3D1", "01JPA3QY7KQ2R8T6V4Y0H1J3K5", "01JPA3QY7MA1B2C3D4E5F6G7H8"]


def record(run_id: str, **fields: object) -> RunRecord:
    values: dict[str, object] = {"id": run_id, "flow": "train", "status": RunStatus.OK, "created_at": CREATED,
                                 "duration_ms": 12_340, "params": {"lr": 0.001, "epochs": 30,
                                                                   "optimizer": "adamw", "note": "x" * 40}}
    return RunRecord.model_validate({**values, **fields})


def lines(width: int, records: list[RunRecord], metrics: dict[str, dict[str, float]] | None = None) -> list[str]:
    console = Console(width=width, record=True, highlight=False)
    console.print(runs_table(records, metrics, width=width))
    return console.export_text().splitlines()


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.replace("┃", "│").split("│")]


def test_at_80_columns_id_flow_status_created_and_duration_stay_whole_and_params_are_elided() -> None:
    shown = lines(80, [record(i) for i in IDS])
    assert all(len(line) <= 80 for line in shown), shown
    assert cells(shown[0]) == ["run", "flow", "status", "created", "duration", "params"]
    rows = [cells(line) for line in shown[2:]]
    assert [row[0] for row in rows] == ["01JPA3QY7K8", "01JPA3QY7KQ", "01JPA3QY7MA"]  # shortest unique prefix
    assert all(row[1:5] == ["train", "ok", "03-14 09:26:53", "12.34s"] for row in rows)
    assert all(row[5].startswith('{"lr": 0.001') and row[5].endswith("…") for row in rows)


def test_wider_terminals_show_whole_ids_and_more_params() -> None:
    narrow = {cells(line)[0]: cells(line)[5] for line in lines(80, [record(i) for i in IDS])[2:]}
    wide = {cells(line)[0]: cells(line)[5] for line in lines(200, [record(i) for i in IDS])[2:]}
    assert set(wide) == set(IDS)
    assert all(len(wide[i]) > len(narrow[p]) for i, p in zip(IDS, short_ids(IDS).values()))
    assert wide[IDS[0]] == '{"lr": 0.001, "epochs": 30, "optimizer": "adamw", "note": "' + "x" * 40 + '"}'


def test_a_long_flow_name_is_cut_at_80_columns_and_a_sweeps_metrics_keep_their_place() -> None:
    records = [record(i, flow="a_flow_with_a_very_long_descriptive_name", seed=n) for n, i in enumerate(IDS)]
    shown = lines(80, records, {i: {"loss": 0.25 * n} for n, i in enumerate(IDS)})
    assert all(len(line) <= 80 for line in shown), shown
    assert cells(shown[0])[:7] == ["run", "flow", "status", "created", "duration", "seed", "loss"]
    row = cells(shown[3])
    assert row[1] == "a_flow_wi…" and row[2:7] == ["ok", "03-14 09:26:53", "12.34s", "1", "0.25"]


def test_no_params_column_when_nothing_is_left_for_it() -> None:
    shown = lines(60, [record(i) for i in IDS])
    assert cells(shown[0]) == ["run", "flow", "status", "created", "duration"]


def test_short_ids_are_the_shortest_unique_prefixes_of_at_least_8() -> None:
    assert short_ids(IDS) == {IDS[0]: "01JPA3QY7K8", IDS[1]: "01JPA3QY7KQ", IDS[2]: "01JPA3QY7MA"}
    assert short_ids(["01AAAAAAAAAA", "01BBBBBBBBBB"]) == {"01AAAAAAAAAA": "01AAAAAA", "01BBBBBBBBBB": "01BBBBBB"}

"""What a command that lists records prints (`fluksio schedule list`, `fluksio alerts log`): JSON, a line when
there are none, or a table."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from fluksio.cli import render


class Item(BaseModel):
    name: str
    size: int


ITEMS = [Item(name="a", size=1), Item(name="bb", size=22)]


def row(item: Item) -> list[str]:
    return [item.name, str(item.size)]


def test_as_json_the_records_are_one_array(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_listing(ITEMS, True, "none", ("name", "size"), row)
    assert json.loads(capsys.readouterr().out) == [{"name": "a", "size": 1}, {"name": "bb", "size": 22}]
    render.print_listing([], True, "none", ("name", "size"), row)
    assert json.loads(capsys.readouterr().out) == []


def test_no_records_is_the_line_that_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_listing([], False, "no items; `add` makes one", ("name", "size"), row)
    assert capsys.readouterr().out == "no items; `add` makes one\n"


def test_records_are_a_table_with_a_row_each(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_listing(ITEMS, False, "none", ("name", "size"), row)
    rules = set(" ─━╇┼│┃")
    lines = [[cell for cell in line.split() if not set(cell) <= rules]
             for line in capsys.readouterr().out.splitlines()]
    assert [line for line in lines if line] == [["name", "size"], ["a", "1"], ["bb", "22"]]

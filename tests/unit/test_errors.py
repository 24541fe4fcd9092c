"""The error tree's helper for one-line messages: the first line of an error text."""

from __future__ import annotations

import pytest

from fluksio.errors import first_line


@pytest.mark.parametrize(("text", "line"), [
    ("ValueError: bad\nTraceback (most recent call last):\n  ...", "ValueError: bad"),
    ("\n\n  KeyError: 'x'\nmore", "KeyError: 'x'"),  # leading blank lines do not make an empty line
    ("one line", "one line"),
])
def test_the_first_line_with_words_is_taken(text: str, line: str) -> None:
    assert first_line(text) == line


@pytest.mark.parametrize("text", [None, "", "  \n\t\n"])
def test_no_words_give_the_default(text: str | None) -> None:
    assert first_line(text) == ""
    assert first_line(text, "failed") == "failed"

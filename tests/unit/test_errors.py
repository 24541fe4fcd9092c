"""The error tree's helpers for one-line messages: the first line of an error text, and "did you mean"."""

from __future__ import annotations

import pytest

from fluksio.errors import did_you_mean, first_line


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


def test_a_near_miss_is_suggested_and_a_far_one_is_not() -> None:
    assert did_you_mean("lrr", ["epochs", "lr", "seed"]) == "; did you mean 'lr'?"
    assert did_you_mean("trian", {"train": 1, "serve": 2}, before=" (") == " (did you mean 'train'?"
    assert did_you_mean("zzz", ["epochs", "lr"]) == ""
    assert did_you_mean("lr", ["lr"]) == ""  # the word itself is no suggestion

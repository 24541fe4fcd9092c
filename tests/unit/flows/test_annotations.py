"""Reading a node's annotations at declaration: which parameters get a validator, and how failures read."""

from __future__ import annotations

from datetime import date
from typing import Any, Optional

import pandas as pd
import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from fluksio import Artifact, Flow
from fluksio.flows.annotations import adapter_for, fit_error, parameter_types, sample, type_name


class Cfg(BaseModel):
    day: date


def test_only_bound_parameters_with_a_real_annotation_get_one():
    def fn(a: int, b: Any, c: object, d, e: Cfg, emit: Any = None) -> None: ...

    assert parameter_types(fn, ["a", "b", "c", "d", "e"], "here") == {"a": int, "e": Cfg}


def test_every_annotated_parameter_gets_a_validator_artifacts_too():
    flow = Flow("art")

    @flow.node(provides="y")
    def use(model: Artifact, frame: pd.DataFrame, n: int = 2) -> int:
        return n

    node = flow.nodes["use"]
    assert node.types == {"model": Artifact, "frame": pd.DataFrame, "n": int}
    assert set(node.adapters) == {"model", "frame", "n"}


def test_adapters_are_made_once_per_annotation():
    assert adapter_for(list[Cfg], "a") is adapter_for(list[Cfg], "b")
    assert isinstance(adapter_for(pd.DataFrame, "x"), TypeAdapter)  # an isinstance check


@pytest.mark.parametrize("annotation, name", [
    (int, "int"), (Cfg, f"{__name__}.Cfg"), (pd.DataFrame, "pandas.DataFrame"), (list[int], "list[int]"),
    (Optional[int], "Optional[int]"), (dict[str, Cfg], f"dict[str, {__name__}.Cfg]"),
])
def test_type_names_read_as_people_write_them(annotation, name):
    assert type_name(annotation) == name


def test_fit_errors_name_where_and_what_and_stop_after_three():
    with pytest.raises(ValidationError) as info:
        TypeAdapter(list[int]).validate_python(["a", "b", "c", "d", "e"])
    text = fit_error(info.value)
    assert text.startswith("at 0: Input should be a valid integer, unable to parse string as an integer (got 'a')")
    assert text.endswith("and 2 more")


def test_samples_show_arrays_by_shape_and_cut_long_values():
    import numpy as np

    assert sample(np.zeros((2, 3))) == "a numpy.ndarray of shape (2, 3)"
    assert sample(pd.DataFrame({"x": [1]})) == "a pandas.DataFrame of shape (1, 1)"
    assert sample(3) == "3 (int)"
    long = sample("x" * 500)
    assert len(long) == 80 and long.endswith("…")

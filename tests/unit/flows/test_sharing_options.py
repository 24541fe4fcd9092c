"""The node options of fair sharing: pool=, retry_backoff_s=, retry_backoff_max_s=, retry_on=, escalate_ram=,
each checked when the node is declared, with an error that says how to fix it."""

from __future__ import annotations

import pytest

from fluksio import Flow, Resources
from fluksio.errors import FlowError
from fluksio.flows.node import error_types, exception_name


class Refused(ConnectionError):
    class Again(Exception):
        pass


def declare(**options):
    flow = Flow("sharing")
    flow.node(lambda: 1, name="solve", provides="x", **options)
    return flow.nodes["solve"]


def test_the_options_land_on_the_node():
    spec = declare(pool="licenses", retries=3, retry_backoff_s=2, retry_backoff_max_s=60,
                   retry_on=(TimeoutError, "ConnectionError", Refused.Again), resources=Resources(ram_mb=4000),
                   escalate_ram=2)
    assert spec.pool == "licenses"
    assert (spec.retries, spec.retry_backoff_s, spec.retry_backoff_max_s) == (3, 2.0, 60.0)
    assert spec.retry_on == ("TimeoutError", "ConnectionError", "Refused.Again")
    assert spec.escalate_ram == 2.0


def test_defaults_retry_any_failure_at_once_in_no_pool():
    spec = declare(retries=1)
    assert (spec.pool, spec.retry_on, spec.escalate_ram, spec.retry_backoff_s) == (None, None, None, 0.0)
    assert declare(retries=2, retry_on=KeyError).retry_on == ("KeyError",)


@pytest.mark.parametrize(("options", "complaint"), [
    ({"pool": "two words"}, "pool 'two words' in node 'solve' of flow 'sharing' is not a valid name"),
    ({"retry_backoff_s": 2}, "retry_backoff_s applies to retries, but the node has retries=0; add retries=N"),
    ({"retry_on": (KeyError,), "escalate_ram": 2}, "retry_on and escalate_ram apply to retries"),
    ({"retries": 2, "retry_backoff_s": -1}, "retry_backoff_s must be a non-negative number of seconds, got -1"),
    ({"retries": 2, "retry_backoff_max_s": 0}, "retry_backoff_max_s must be a positive number of seconds, got 0"),
    ({"retries": 2, "retry_backoff_s": 10, "retry_backoff_max_s": 5}, r"retry_backoff_max_s \(5\) is less than"),
    ({"retries": 2, "retry_on": ()}, "retry_on is empty, so no failure would be retried"),
    ({"retries": 2, "retry_on": (KeyError, 3)}, "retry_on takes exception classes or their names .*got 3"),
    ({"retries": 2, "retry_on": "not a name"}, "retry_on takes exception classes or their names"),
    ({"retries": 2, "retry_on": int}, "retry_on takes exception classes or their names"),
    ({"retries": 2, "escalate_ram": 2.0}, "escalate_ram multiplies the RAM the node asks for, and it asks for none"),
    ({"retries": 2, "escalate_ram": 1.0, "resources": Resources(ram_mb=100)}, "escalate_ram must be a number greater"),
    ({"retries": 2, "escalate_ram": "2", "resources": Resources(ram_mb=100)}, "escalate_ram must be a number"),
    ({"retries": 2, "retry_backoff_s": float("nan")}, "retry_backoff_s must be a non-negative number of seconds"),
    ({"retries": 2, "retry_backoff_max_s": float("inf")}, "retry_backoff_max_s must be a positive number"),
    ({"retries": 2, "escalate_ram": float("inf"), "resources": Resources(ram_mb=100)}, "escalate_ram must be a num"),
    ({"retries": 2, "escalate_ram": float("nan"), "resources": Resources(ram_mb=100)}, "escalate_ram must be a num"),
    ({"timeout_s": float("nan")}, "timeout_s must be a positive number of seconds, got nan"),
    ({"timeout_s": float("inf")}, "timeout_s must be a positive number of seconds, got inf"),
    ({"pol": "licenses"}, r"unknown option\(s\) 'pol' \(did you mean 'pool'\?\)"),
])
def test_a_bad_option_is_a_flow_error_saying_how_to_fix_it(options, complaint):
    with pytest.raises(FlowError, match=complaint):
        declare(**options)


def test_failures_carry_their_class_and_bases_for_retry_on_to_match_across_processes():
    assert error_types(TimeoutError("slow")) == ("TimeoutError", "OSError", "Exception", "BaseException")
    assert error_types(Refused())[:2] == (f"{__name__}.Refused", "ConnectionError")
    assert error_types(Refused.Again())[0] == f"{__name__}.Refused.Again"
    assert exception_name(Refused.Again) == "Refused.Again"

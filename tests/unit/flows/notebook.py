"""Flows defined with no file behind them, as in a notebook cell or a REPL."""

from __future__ import annotations

import textwrap

from fluksio import Flow


def notebook_flow(body: str, name: str = "cell") -> Flow:
    """A flow whose one node ``step(x)`` returns ``body``, defined by code that has no ``__file__``."""
    namespace: dict = {"Flow": Flow, "__name__": "notebook"}
    exec(textwrap.dedent(f"""
        flow = Flow({name!r}, inputs={{"x": int}})
        def step(x):
            return {body}
        flow.node(step, provides="y")
    """), namespace)
    return namespace["flow"]

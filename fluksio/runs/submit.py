"""Submit: validate everything that can be checked now, then journal the run as ``queued``.

The caller hears about unknown inputs, wrong types and unplaceable labels at
once, not from a failing run.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from fluksio.artifacts.artifact import REF_KEY, Artifact, is_ref
from fluksio.artifacts.store import ArtifactStore
from fluksio.cache.keys import canonical
from fluksio.clock import utcnow
from fluksio.codecs import REGISTRY, Codec, codec_for, codec_of, store_value
from fluksio.errors import CodecError, RunRejected, did_you_mean
from fluksio.flows.flow import Flow, InputSpec
from fluksio.flows.package import FLOWFILE_MODULE_PREFIX
from fluksio.flows.registry import FlowRegistry
from fluksio.flows.secret import Secret, secret_name
from fluksio.runs.code import DESCRIBED, RunCode, describe_once, earlier, ship
from fluksio.runs.references import is_reference
from fluksio.runs.references import resolve as resolve_reference
from fluksio.schemas import DevicePolicy, Inventory, RunStatus
from fluksio.security.signatures import Signer
from fluksio.store.db import Database
from fluksio.store.ids import new_run_id
from fluksio.store.models import Run
from fluksio.store.run_rows import find_by_idempotency_key, insert_run

#: The input that ``seed=`` fills.
SEED_INPUT = "seed"
#: Priorities are stored as 32-bit integers.
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def params_digest(params: Mapping[str, Any], seed: int | None) -> str:
    """Identity of an experiment's settings: the params and the seed."""
    return "sha256:" + hashlib.sha256(canonical({"params": params, "seed": seed}).encode()).hexdigest()


def validate_params(flow: Flow, params: Any, seed: int | None,
                    resolve: Callable[[str, str], Any] | None = None,
                    store: ArtifactStore | None = None) -> dict[str, Any]:
    """The run's full parameters (defaults filled, seed applied, references resolved), or :class:`RunRejected`.

    An input of a codec's type (``pandas.DataFrame`` …) takes a reference to such a value, or the value
    itself, which is stored in ``store`` (without one, the value is only checked and returned as it is).
    """
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise RunRejected(f"params must be a mapping of input name to value, got {type(params).__name__}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not -2**63 <= seed < 2**63):
        raise RunRejected(f"seed must be a whole number that fits 64 bits, got {seed!r}")
    declared = ", ".join(sorted(flow.inputs)) or "nothing"
    for name in params:
        if name not in flow.inputs:
            raise RunRejected(f"{name!r} is not an input of flow {flow.name!r} (it declares: {declared})"
                              f"{did_you_mean(str(name), flow.inputs)}")
    values = dict(params)
    if seed is not None and SEED_INPUT in flow.inputs and SEED_INPUT not in values:
        values[SEED_INPUT] = seed
    checked: dict[str, Any] = {}
    for name, spec in flow.inputs.items():
        if spec.type is Secret:
            # Only its name is journaled; the worker that runs the node resolves it (fluksio/execution/secrets.py).
            if name not in values and spec.required:
                raise RunRejected(f"flow {flow.name!r} needs input {name!r} (Secret); give the secret's name as "
                                  f"the parameter (like {name}=HF_TOKEN), and its value to the workers as "
                                  "FLUKSIO_SECRET_HF_TOKEN or a file in their FLUKSIO_SECRETS_DIR")
            checked[name] = _secret_name(flow, name, values[name] if name in values else spec.default)
        elif name not in values:
            checked[name] = _default(flow, spec)
        else:
            checked[name] = _given(flow, spec, values[name], resolve, store)
    return checked


def _default(flow: Flow, spec: InputSpec) -> Any:
    """An input not given: its default, as JSON (an input without one is refused, saying how to give it)."""
    if spec.required:
        hint = " (or pass seed=)" if spec.name == SEED_INPUT else ""
        raise RunRejected(f"flow {flow.name!r} needs input {spec.name!r} ({spec.type_name}); give it as a "
                          f"parameter{hint}")
    try:
        return to_jsonable_python(spec.default)
    except Exception:
        raise RunRejected(f"the default of input {spec.name!r} of flow {flow.name!r} ({spec.default!r}) cannot be "
                          "stored as JSON; give a JSON value as the default, or pass the input") from None


def _given(flow: Flow, spec: InputSpec, original: Any, resolve: Callable[[str, str], Any] | None,
           store: ArtifactStore | None) -> Any:
    """A given input checked against its type, a reference resolved (when ``resolve`` is given), as JSON."""
    name, given = spec.name, original
    if is_ref(given):  # an artifact reference written out: checked like the digest it names
        digest = given[REF_KEY].get("digest") if isinstance(given[REF_KEY], dict) else None
        given = digest if isinstance(digest, str) else repr(given)
        if not is_reference(given):
            raise RunRejected(f"input {name!r}: {original!r} is not an artifact reference")
    if resolve is not None and is_reference(given):
        given = resolve(name, given)
    unresolved = resolve is None and is_reference(given)  # a check only: resolved when the run is made
    if spec.type is Artifact:
        if not is_ref(given) and not unresolved:
            raise RunRejected(f"input {name!r} of flow {flow.name!r} takes an artifact; pass its digest "
                              "(sha256:… or blake3:…) or a run's output (@run:<id>.<output>)")
        return given
    codec = REGISTRY.for_type(spec.type) if isinstance(spec.type, type) else None
    if codec is not None:
        return given if unresolved else _codec_input(flow, name, codec, given, store)
    try:
        value = spec.adapter().validate_python(given, strict=True)
    except ValidationError as exc:
        raise RunRejected(f"input {name!r} of flow {flow.name!r} must be {spec.type_name}, got {original!r} "
                          f"({type(original).__name__}): {exc.errors()[0]['msg']}") from None
    try:
        jsonable = to_jsonable_python(value)
        canonical(jsonable)
    except Exception:
        raise RunRejected(f"input {name!r}: {value!r} cannot be stored as JSON (NaN and infinities "
                          "cannot either)") from None
    return jsonable


def _secret_name(flow: Flow, name: str, given: Any) -> str:
    try:
        return secret_name(given, f"input {name!r} of flow {flow.name!r}")
    except ValueError as exc:
        raise RunRejected(str(exc)) from None


def _codec_input(flow: Flow, name: str, codec: Codec, given: Any, store: ArtifactStore | None) -> Any:
    """An input of a codec's type: a reference to a value of that codec, or the value (stored now)."""
    if is_ref(given):
        held = codec_of(given)
        if held != codec.name:
            what = f"a value of codec {held!r}" if held else "plain bytes (an Artifact)"
            raise RunRejected(f"input {name!r} of flow {flow.name!r} takes a {codec.type_name}; "
                              f"{given[REF_KEY].get('digest')} holds {what}")
        return given
    if codec_for(given) is not codec:
        raise RunRejected(f"input {name!r} of flow {flow.name!r} must be a {codec.type_name}, or a reference to one "
                          f"(@run:<id>.<output>, blake3:…); got {type(given).__module__}.{type(given).__qualname__}")
    if store is None:
        return given
    try:
        return store_value(given, codec, store, name)[1]
    except CodecError as exc:
        raise RunRejected(f"input {name!r} of flow {flow.name!r} {exc}") from None


def check_priority(priority: Any) -> int:
    """A run's priority: a whole number (higher is granted first), or :class:`RunRejected`."""
    low, high = PRIORITY_RANGE
    if not isinstance(priority, int) or isinstance(priority, bool) or not low <= priority <= high:
        raise RunRejected(f"priority must be a whole number from {low} to {high} (higher runs first), "
                          f"got {priority!r}")
    return priority


def check_placeable(flow: Flow, machines: list[Inventory]) -> None:
    """In the embedded default no other machine can ever attach: refuse labels nobody carries now (in the
    flow, and in the flows it runs as subflows)."""
    for node in flow.all_nodes():
        if node.device is None or node.device_policy is not DevicePolicy.REQUIRE:
            continue
        if not any(m.carries(node.device) for m in machines):
            names = ", ".join(m.name for m in machines) or "none"
            raise RunRejected(
                f"node {node.name!r} of flow {flow.name!r} requires a worker labelled {node.device!r}, and the "
                f"embedded machine ({names}) does not carry it. Either run a `fluksio worker --labels "
                f"{node.device}` with FLUKSIO_BROKER_URL set to a shared broker, give the embedded machine the "
                f"label (FLUKSIO_LABELS={node.device}), or declare the node with device_policy='prefer'"
            )


def check_pools(flow: Flow, pools: Mapping[str, int]) -> None:
    """Every pool a node names (in the flow, and in the flows it runs as subflows) is one of the installation's."""
    for node in flow.all_nodes():
        if node.pool is not None and node.pool not in pools:
            known = ", ".join(f"{name} ({slots})" for name, slots in sorted(pools.items())) or "none"
            raise RunRejected(
                f"node {node.name!r} of flow {flow.name!r} asks for pool {node.pool!r}, which this installation "
                f"does not have (its pools: {known}); add it to the pools setting (FLUKSIO_POOLS="
                f"'{{\"{node.pool}\": 4}}' or a [pools] table in fluksio.toml), or name one of those"
            )


def flow_reference(flow: Flow) -> str | None:
    """``module:attr`` or ``file.py:attr`` by which another process can load this flow."""
    module = sys.modules.get(flow.module)
    attr = next((k for k, v in vars(module).items() if v is flow), None) if module else None
    if attr is None:
        return None
    if flow.module != "__main__" and not flow.module.startswith(FLOWFILE_MODULE_PREFIX):
        return f"{flow.module}:{attr}"
    return f"{flow.source_file}:{attr}" if flow.source_file else None


def _flow_and_code(db: Database, registry: FlowRegistry, artifacts: ArtifactStore, flow_or_name: Flow | str,
                   code: RunCode | str | None, code_max_mb: float,
                   signer: Signer | None) -> tuple[Flow, Callable[[], RunCode]]:
    """The flow a run is submitted for, and what makes the code it records (runs/code.py): called once every
    other check passed, so that a refused submit stores no package."""
    if isinstance(code, str):  # an earlier package, run again unchanged: its graph is the flow, not this process's
        name = flow_or_name.name if isinstance(flow_or_name, Flow) else flow_or_name
        if not isinstance(name, str) or not name:
            raise RunRejected(f"expected a Flow or a flow's name with code=, got {flow_or_name!r}")
        run_code, flow = earlier(db, artifacts, name, code, signer)  # stores nothing
        return flow, lambda: run_code
    if isinstance(flow_or_name, Flow) and flow_or_name.module == DESCRIBED:
        flow = flow_or_name.validate()  # rebuilt from a description (a shipped run's subflow): never registered
    else:
        flow = registry.resolve(flow_or_name)
    if code is None:
        return flow, lambda: ship(flow, artifacts, max_mb=code_max_mb, signer=signer)
    inherited = code
    return flow, lambda: inherited if inherited.graph is not None else replace(
        inherited, graph=describe_once(flow, artifacts))


def submit_run(
    db: Database,
    registry: FlowRegistry,
    artifacts: ArtifactStore,
    flow_or_name: Flow | str,
    *,
    engine: str,
    params: Mapping[str, Any] | None = None,
    seed: int | None = None,
    group: str | None = None,
    no_cache: bool = False,
    idempotency_key: str | None = None,
    embedded_machines: list[Inventory] | None = None,
    priority: int = 0,
    schedule: str | None = None,
    schedule_tick: datetime | None = None,
    parent_id: str | None = None,
    parent_node: str | None = None,
    pools: Mapping[str, int] | None = None,
    code: RunCode | str | None = None,
    code_max_mb: float = 20.0,
    signer: Signer | None = None,
) -> tuple[Run, bool]:
    """Journal a run. Returns the row and whether it is new (``False``: an idempotent retry).

    ``schedule`` and ``schedule_tick``: the schedule whose tick (a UTC time) submits the run;
    ``parent_id`` and ``parent_node``: the run and the call (``trial[2]``) whose child run this is;
    ``pools``: the installation's pools, which the flow's nodes must name from (``None``: not checked);
    ``code``: an earlier code package's digest to run again unchanged, or the code a child run inherits from its
    parent (else the flow's own code is shipped: runs/code.py, packages up to ``code_max_mb``, signed by
    ``signer`` when given).
    """
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not 0 < len(idempotency_key) <= 200:
            raise RunRejected("idempotency_key must be a non-empty string of at most 200 characters")
        existing = find_by_idempotency_key(db, idempotency_key)
        if existing is not None:
            return existing, False
    if group is not None and (not isinstance(group, str) or not 0 < len(group) <= 64):
        raise RunRejected("group must be a non-empty string of at most 64 characters")
    check_priority(priority)
    flow, code_of = _flow_and_code(db, registry, artifacts, flow_or_name, code, code_max_mb, signer)
    # What the flow asks of the installation first: validating the inputs stores codec values as artifacts.
    if embedded_machines is not None:
        check_placeable(flow, embedded_machines)
    if pools is not None:
        check_pools(flow, pools)
    values = validate_params(flow, params, seed,
                             resolve=lambda name, value: resolve_reference(db, artifacts, name, value),
                             store=artifacts)
    run_code = code_of()
    run = Run(
        id=new_run_id(), flow=flow.name, flow_ref=flow_reference(flow), flow_version=flow.version,
        params=values, params_digest=params_digest(values, seed), seed=seed, group_id=group,
        code_digest=run_code.digest, code_entry=run_code.entry, code_signature=run_code.signature,
        graph_digest=run_code.graph,
        status=RunStatus.QUEUED.value, created_at=utcnow(), engine=engine, idempotency_key=idempotency_key,
        no_cache=bool(no_cache), cancel_requested=False, priority=priority, schedule=schedule,
        schedule_tick=schedule_tick, parent_id=parent_id, parent_node=parent_node,
    )
    return insert_run(db, run)

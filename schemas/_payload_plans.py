"""A payload model's plan: its fields as the native core checks them, to validate, dump and
encode a payload in one pass (see schemas/native/src/plan.rs).

Invariant: a plan exists only for a model whose core schema holds nothing but fields of the
kinds the native check knows (str with at most a non-empty constraint, int and float with at
most a lower bound, bool, a literal of strings, a list/tuple of int, float or str, a dict of
str to anything; each optional, nullable, with a plain default or excluded while None); no
validators, serializers, aliases or nested models. For such a model the native check either
writes exactly the canonical bytes of `dump_payload` or declines, and pydantic decides: the
reference stays the model, and a differential test holds the two together.

A plan also carries its model's content fields (`content_spec`), so that a subject session's
payload has its content sealed in the same pass, as `seal_content` (the reference) seals it.

Why: recording validates every payload before sealing it. pydantic's validation and dump of a
1 KB turn cost about 2.2 µs and the canonical walk another 0.9; checked natively against the
plan, the three cost a few hundred nanoseconds. Sealing a subject session's 1 KB turn in Python
(`seal_content` on the dump) cost another 11 µs; in the plan's pass it costs under 2, mostly
the nonce's HMAC and the hash of the longer record.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

from rolltape.schemas import _accel
from rolltape.schemas._canonical import canonical_bytes
from rolltape.schemas._content_fields import CONTENT_FIELDS, unset

_SCALARS = {"str", "int", "float", "bool"}
_ITEMS = {"int": "ints", "float": "floats", "str": "strs"}
_PLAIN = (type(None), bool, int, float, str, tuple)
"""Defaults a plan writes as they are (a tuple only when empty: `()`)."""
_FACTORIES: dict[Any, Any] = {dict: {}, list: [], tuple: ()}
"""default_factory values a plan takes: the empty containers (any other factory may give
something new each time)."""


class _NoPlan(Exception):
    """The model has a field the native check does not know."""


def dump_payload(model: type[BaseModel], payload: Any) -> Any:
    """The payload as its model validates and dumps it (pydantic's ValidationError otherwise):
    what gets sealed, and what a plan is held to."""
    return model.__pydantic_serializer__.to_python(
        model.__pydantic_validator__.validate_python(payload)
    )


_PLANS: dict[type[BaseModel], Any] = {}
"""The native plan of each model asked about (None: the model has none)."""


def payload_plan(model: type[BaseModel]) -> Any | None:
    """The native plan of `model`, or None (no native core now, or a field it does not know).
    Kept per model once made; with the native core switched off (`reference_only`) it is
    neither made nor kept, so a later call with the core on still finds the plan."""
    native = _accel.native
    if native is None:
        return None
    try:
        return _PLANS[model]
    except KeyError:
        try:
            plan = native.PayloadPlan(plan_fields(model), plan_content(model))
        except _NoPlan:
            plan = None
        _PLANS[model] = plan
        return plan


@functools.cache
def content_spec(event_type: str) -> tuple[tuple[str, bool, Any], ...]:
    """(name, required, the value left in clear) of each content field of `event_type`: what
    sealing takes out of its payloads (a value equal to the one left in clear is not sealed)."""
    from rolltape.schemas._payloads import PAYLOAD_MODELS

    model = PAYLOAD_MODELS[event_type]
    spec = []
    for name in CONTENT_FIELDS.get(event_type, ()):
        info = model.model_fields[name]
        required = info.is_required()
        spec.append(
            (name, required, "" if required else info.get_default(call_default_factory=True))
        )
    return tuple(spec)


def plan_content(model: type[BaseModel]) -> list[tuple[str, bytes]]:
    """(name, canonical bytes of the value left in clear) of each content field of the event
    type whose model `model` is; none for a model of no such type."""
    from rolltape.schemas._payloads import PAYLOAD_MODELS

    types = [name for name in CONTENT_FIELDS if PAYLOAD_MODELS.get(name) is model]
    if len(types) != 1:
        return []
    return [(name, canonical_bytes(empty)) for name, _, empty in content_spec(types[0])]


def plan_fields(model: type[BaseModel]) -> list[tuple[Any, ...]]:
    """(name, kind, nullable, omit_none, default bytes or None, nonempty, ge, literals) per
    field, from the model's core schema; _NoPlan for anything else."""

    schema: Any = model.__pydantic_core_schema__
    if schema.get("type") != "model" or set(schema) - {
        "type",
        "cls",
        "config",
        "ref",
        "metadata",
        "custom_init",
        "root_model",
        "schema",
    }:
        raise _NoPlan
    if schema.get("custom_init") or schema.get("root_model"):
        raise _NoPlan
    if schema.get("config", {}).get("extra_fields_behavior") != "forbid":
        raise _NoPlan
    inner = schema["schema"]
    if (
        inner.get("type") != "model-fields"
        or inner.get("computed_fields")
        or set(inner)
        - {
            "type",
            "fields",
            "model_name",
            "computed_fields",
        }
    ):
        raise _NoPlan
    out = []
    for name, field in inner["fields"].items():
        if set(field) - {"type", "schema", "metadata", "serialization_exclude_if"}:
            raise _NoPlan  # aliases, serializers, frozen fields...
        exclude = field.get("serialization_exclude_if")
        if exclude is not None and exclude is not unset:
            raise _NoPlan
        out.append((name, *_field(field["schema"]), exclude is not None))
    # (name, kind, nullable, default, nonempty, ge, literals, omit_none) -> the native order
    return [
        (name, kind, nullable, omit, default, nonempty, ge, literals)
        for name, kind, nullable, default, nonempty, ge, literals, omit in out
    ]


def _field(schema: dict[str, Any]) -> tuple[Any, ...]:
    """(kind, nullable, default bytes or None, nonempty, ge, literals) of a field's schema."""
    default: bytes | None = None
    if schema.get("type") == "default":
        if set(schema) - {
            "type",
            "schema",
            "default",
            "default_factory",
            "default_factory_takes_data",
        }:
            raise _NoPlan
        if "default_factory" in schema:
            if (
                schema.get("default_factory_takes_data")
                or schema["default_factory"] not in _FACTORIES
            ):
                raise _NoPlan
            value = _FACTORIES[schema["default_factory"]]
        else:
            value = schema["default"]
            if type(value) not in _PLAIN or value in ([], {}):
                raise _NoPlan  # a model or a container: pydantic dumps it its own way
        default = canonical_bytes(value)
        schema = schema["schema"]
    nullable = schema.get("type") == "nullable"
    if nullable:
        if set(schema) - {"type", "schema"}:
            raise _NoPlan
        schema = schema["schema"]
    kind = schema.get("type")
    if kind == "literal":
        expected: Any = schema.get("expected")
        if set(schema) - {"type", "expected"} or not all(type(e) is str for e in expected):
            raise _NoPlan
        return "literal", nullable, default, False, None, list(expected)
    if kind in _SCALARS:
        allowed = {"type", "min_length"} if kind == "str" else {"type", "ge"}
        if kind == "bool":
            allowed = {"type"}
        if set(schema) - allowed or schema.get("min_length", 0) > 1:
            raise _NoPlan
        ge = schema.get("ge")
        if (
            ge is not None
            and type(ge) is not (int if kind == "int" else float)
            and not (kind == "float" and type(ge) is int)
        ):
            raise _NoPlan
        return kind, nullable, default, schema.get("min_length", 0) == 1, ge, []
    if kind in ("tuple", "list"):
        items: Any = schema.get("items_schema")
        if kind == "tuple":
            if set(schema) - {"type", "items_schema", "variadic_item_index"}:
                raise _NoPlan
            if schema.get("variadic_item_index") != 0 or len(items) != 1:
                raise _NoPlan
            items = items[0]
        elif set(schema) - {"type", "items_schema"}:
            raise _NoPlan
        if not isinstance(items, dict) or set(items) != {"type"} or items["type"] not in _ITEMS:
            raise _NoPlan
        return _ITEMS[items["type"]], nullable, default, False, None, []
    if kind == "dict":
        if set(schema) - {"type", "keys_schema", "values_schema"}:
            raise _NoPlan
        if schema.get("keys_schema") != {"type": "str"} or schema.get("values_schema") != {
            "type": "any"
        }:
            raise _NoPlan
        return "dict", nullable, default, False, None, []
    raise _NoPlan

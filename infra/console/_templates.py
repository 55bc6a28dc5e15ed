"""The pages' templates (Jinja2, shipped in the package's `templates/` folder) and the filters
they format values with.

Autoescaping is on for every template and no recorded value is ever marked safe: a model's
output, a tool's result, a file's contents or a task name is shown as the text it is, whatever
markup it holds. Undefined names fail loudly (a template that names a missing field is a bug,
not an empty cell). Rendering is deterministic: the same view gives the same bytes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape


def _clock_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _clock_ns(ns: int | None) -> str:
    if ns is None:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


def _json(value: Any) -> str:
    """Indented JSON of a recorded value (text: the template escapes it)."""
    return orjson.dumps(
        value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    ).decode()


def _short(value: str | None, n: int = 12) -> str:
    return "-" if value is None else value[:n]


def make_environment() -> Environment:
    env = Environment(
        loader=PackageLoader("rolltape.infra.console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        clock=_clock_ms, clock_ns=_clock_ns, number=_number, json=_json, short=_short
    )
    return env


__all__ = ["make_environment"]

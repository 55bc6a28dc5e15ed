"""Environments by name: the shipped ones, those registered by plugins, or `module:Class`."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from rolltape.producers.environments._base import Environment

_ENVIRONMENTS: dict[str, Callable[[], Environment]] = {}


def register_environment(name: str, factory: Callable[[], Environment]) -> None:
    """Make `load_environment(name)` build `factory()`, a fresh environment per load. The last
    registration of a name wins, over the shipped `bugfix` too."""
    _ENVIRONMENTS[name] = factory


def environment_names() -> list[str]:
    """The registered names, shipped ones included, sorted (`jsonl:` and `module:Class` specs
    load too but are not listed)."""
    _shipped()
    return sorted(_ENVIRONMENTS)


def load_environment(spec: str) -> Environment:
    """A registered name (`bugfix`), `jsonl:PATH` (a file of items, as `rolltape cron to-env`
    writes) or `package.module:Class`; ValueError saying what exists."""
    _shipped()
    if spec in _ENVIRONMENTS:
        return _ENVIRONMENTS[spec]()
    if spec.startswith("jsonl:"):
        from rolltape.producers.environments._items_file import ItemsFileEnv

        return ItemsFileEnv(Path(spec.removeprefix("jsonl:")).expanduser())
    module_name, sep, attribute = spec.partition(":")
    if not sep:
        known = ", ".join(sorted(_ENVIRONMENTS))
        raise ValueError(
            f"unknown environment {spec!r}: one of {known}, jsonl:PATH or package.module:Class"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"environment {spec!r}: cannot import {module_name!r}: {exc}") from exc
    factory = getattr(module, attribute, None)
    if not (isinstance(factory, type) and issubclass(factory, Environment)):
        raise ValueError(f"environment {spec!r}: {attribute!r} is not an Environment subclass")
    return factory()


def _shipped() -> None:
    if "bugfix" not in _ENVIRONMENTS:
        from rolltape.producers.environments.bugfix import BugFixEnv

        _ENVIRONMENTS["bugfix"] = BugFixEnv

"""Environments by name: the shipped ones, those registered by plugins, or `module:Class`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rolltape.producers.environments._base import Environment
from rolltape.schemas.plugins import PluginLoadError, Registry, UnknownPluginError, load_object

EnvironmentFactory = Callable[[], Environment]
"""Builds a fresh environment per load (an `Environment` subclass is one)."""


def _bugfix() -> Environment:
    # imported on first load: the bug-fix environment imports this package
    from rolltape.producers.environments.bugfix import BugFixEnv

    return BugFixEnv()


def _bugfix_judged() -> Environment:
    from rolltape.producers.environments.bugfix import BugFixJudgedEnv

    return BugFixJudgedEnv()


_ENVIRONMENTS = Registry[EnvironmentFactory]("environment")
_ENVIRONMENTS.register("bugfix", _bugfix)
_ENVIRONMENTS.register("bugfix-judged", _bugfix_judged)


def register_environment(name: str, factory: EnvironmentFactory, *, replace: bool = False) -> None:
    """Make `load_environment(name)` build `factory()`, a fresh environment per load. A name
    that is taken, the shipped `bugfix` too, is refused (`DuplicatePluginError`) unless
    `replace`."""
    _ENVIRONMENTS.register(name, factory, replace=replace)


def environment_names() -> list[str]:
    """The registered names, shipped ones included, sorted (`jsonl:` and `module:Class` specs
    load too but are not listed)."""
    return list(_ENVIRONMENTS)


def load_environment(spec: str) -> Environment:
    """A registered name (`bugfix`), `jsonl:PATH` (a file of items, as `rolltape cron to-env`
    writes) or `package.module:Class`; a `PluginError` (a ValueError) saying what exists."""
    if spec in _ENVIRONMENTS:
        return _ENVIRONMENTS[spec]()
    if spec.startswith("jsonl:"):
        from rolltape.producers.environments._items_file import ItemsFileEnv

        return ItemsFileEnv(Path(spec.removeprefix("jsonl:")).expanduser())
    if ":" not in spec:
        known = ", ".join(_ENVIRONMENTS)
        raise UnknownPluginError(
            f"unknown environment {spec!r}: one of {known}, jsonl:PATH or package.module:Class"
        )
    factory = load_object(spec, "environment", what="Class")
    if not (isinstance(factory, type) and issubclass(factory, Environment)):
        raise PluginLoadError(f"environment {spec!r} is {factory!r}, not an Environment subclass")
    return factory()

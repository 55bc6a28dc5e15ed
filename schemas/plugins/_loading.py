"""The one loader of plugin code named in configuration: `package.module:attr` specs and
plugin modules.

Cron runners, environments and the worker's plugin modules are named in configuration, so the
name arrives as a string. Loading it in one place gives every kind the same spec grammar and the
same errors: a `PluginLoadError` that says which of form, import or attribute was wrong, and
what a valid spec looks like. Importing runs the module's code, so a module that raises while
importing is reported the same way (with its exception kept as `__cause__`): for the user it is
one fact, the plugin does not load.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from rolltape.schemas.plugins._errors import PluginLoadError


def load_module(name: str, kind: str) -> ModuleType:
    """Import the module `name` (`package.module`) for what it does on import, typically
    registering plugins; `kind` names it in the error ("plugin module")."""
    if not _is_dotted_name(name):
        raise PluginLoadError(
            f"{kind} {name!r} is not a module name: use a dotted name such as 'package.module'"
        )
    return _import(name, f"cannot import {kind} {name!r}")


def load_object(spec: str, kind: str, *, what: str = "object") -> object:
    """The object a spec `package.module:attr` names; `attr` may be dotted (`module:Class.attr`).

    `kind` names the plugin in the error ("runner"), `what` the thing after the colon
    ("function", "class"), so the error shows a valid spec of that kind. The caller checks that
    the object is the kind of plugin it needs, and raises `PluginLoadError` when it is not.
    """
    module_name, sep, path = spec.partition(":")
    if not (sep and _is_dotted_name(module_name) and _is_dotted_name(path)):
        raise PluginLoadError(
            f"{kind} {spec!r} must be 'package.module:{what}': a module to import, a colon "
            "and a name in it (dotted to reach inside: 'package.module:Outer.inner')"
        )
    found: object = _import(module_name, f"{kind} {spec!r}: cannot import {module_name!r}")
    reached = module_name
    for part in path.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            inside = "" if reached == module_name else f" ({reached} has no attribute {part!r})"
            raise PluginLoadError(
                f"{kind} {spec!r}: {module_name} has no {what} {path!r}{inside}"
            ) from None
        reached = f"{reached}.{part}"
    return found


def _import(module_name: str, failure: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:  # any failure while importing means this plugin does not load
        # missing: the module or a package above it, not a module it imports in turn
        gone = exc.name if isinstance(exc, ModuleNotFoundError) else None
        missing = gone is not None and f"{module_name}.".startswith(f"{gone}.")
        advice = "is it installed, or on PYTHONPATH?" if missing else "raised while importing it"
        raise PluginLoadError(f"{failure}: {type(exc).__name__}: {exc}; {advice}") from exc


def _is_dotted_name(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))

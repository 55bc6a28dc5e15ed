"""rolltape.schemas.plugins: the one plugin mechanism.

A `Registry[T]` holds one kind of plugin by name (delivery channels, toolsets, environments,
reward functions, LLM judges); `load_object` loads what a `package.module:attr` spec in
configuration names (cron runners, environment classes) and `load_module` a plugin module
imported for its registrations. Errors have their own root, `PluginError`. It sits under
schemas because producers and processors both need it and may depend on nothing else of ours,
and apart from `rolltape.schemas` because reading the wire format never loads plugin code.
"""

from rolltape.schemas.plugins._errors import (
    DuplicatePluginError,
    PluginError,
    PluginLoadError,
    UnknownPluginError,
)
from rolltape.schemas.plugins._loading import load_module, load_object
from rolltape.schemas.plugins._registry import Registry

__all__ = [
    "DuplicatePluginError",
    "PluginError",
    "PluginLoadError",
    "Registry",
    "UnknownPluginError",
    "load_module",
    "load_object",
]

"""The one exception root of rolltape.schemas.plugins.

    PluginError               a plugin could not be loaded, registered or found
    ├── PluginLoadError       a `package.module:attr` spec, or a plugin module, does not load:
    │                         bad form, the module does not import, the attribute is missing,
    │                         or what it names is not the kind of plugin asked for
    ├── DuplicatePluginError  a name is registered already (pass `replace=True` to replace it)
    └── UnknownPluginError    no plugin of that kind is registered under the name asked for

`PluginError` is a root of its own, not a `SchemaError`: a plugin that will not load is a
mistake in configuration or in code, not bad wire data, and a handler of bad data (one that
dead-letters a record) must never swallow it. Each leaf is also a `ValueError` (the value named
no usable plugin), so a caller that validates configuration with `except ValueError` keeps
working; `UnknownPluginError` is also a `KeyError`, because a registry is a `Mapping` and
`registry.get(name)` must still answer None for a name it lacks.
"""

from __future__ import annotations

from rolltape.schemas._errors import RolltapeError


class PluginError(RolltapeError):
    """Root of every error raised by rolltape.schemas.plugins; the message says what to fix."""


class PluginLoadError(PluginError, ValueError):
    """A spec or module named no loadable plugin; the message says what was wrong and what a
    valid spec looks like."""


class DuplicatePluginError(PluginError, ValueError):
    """A plugin registered a name another one already holds."""


class UnknownPluginError(PluginError, KeyError, ValueError):
    """No plugin is registered under the name asked for; the message lists the known names."""

    # KeyError's str() is the repr of its argument (quotes and escapes): show the message.
    __str__ = Exception.__str__

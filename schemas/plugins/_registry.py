"""One kind of plugin, by name: the only shape a plugin registry takes.

Every extension point that users fill by name (delivery channels, toolsets, environments,
reward functions, LLM judges) is a `Registry` of its plugin type, so they all refuse a name that
is taken, list the known names the same way when one is missing, and are typed by the checker.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeVar

from rolltape.schemas.plugins._errors import DuplicatePluginError, UnknownPluginError

T = TypeVar("T")


class Registry(Mapping[str, T]):
    """Plugins of one kind by name: a read-only `Mapping` plus `register`.

    `registry[name]` raises `UnknownPluginError` listing the registered names, `registry.get`
    answers None, `name in registry` tests, and iterating gives the names sorted (so listings
    and error messages do not depend on import order). A registry is process-wide: plugin
    modules call `register` when imported.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        """What one plugin is, for messages: "reward function", "delivery channel"."""
        self._plugins: dict[str, T] = {}

    def register(self, name: str, plugin: T, *, replace: bool = False) -> None:
        """Make `name` give `plugin`. A name that is taken is refused unless `replace`: two
        plugins claiming one name is a mistake to see, not a race the later import wins."""
        if name in self._plugins and not replace:
            raise DuplicatePluginError(
                f"a {self.kind} named {name!r} is registered already "
                f"({self._plugins[name]!r}); pass replace=True to replace it"
            )
        self._plugins[name] = plugin

    def __getitem__(self, name: str) -> T:
        try:
            return self._plugins[name]
        except KeyError:
            raise UnknownPluginError(f"unknown {self.kind} {name!r}: {self.known()}") from None

    def known(self) -> str:
        """The registered names as the lookup error lists them, for a caller whose own error
        (a spec with more forms than a name) lists them too."""
        if not self._plugins:
            return f"no {self.kind} is registered"
        return f"registered {self.kind}s are {', '.join(self)}"

    def __contains__(self, name: object) -> bool:
        return name in self._plugins

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._plugins))

    def __len__(self) -> int:
        return len(self._plugins)

    def __repr__(self) -> str:
        return f"<Registry of {self.kind}s: {', '.join(self)}>"

"""The rule of docs/architecture.md for `infra/cli/`: a CLI module parses arguments, calls a
command of `infra/commands/` and prints, so it imports typer, rich, the standard library, its own
package and `infra/commands/` only.

The rule is not met yet: the modules below still reach into Kafka, the broker, the recorders or
the pure packages themselves (docs/limitations.md). The table is a ratchet: a module may not
gain an import outside the rule, and an entry that is no longer imported must go, so the table
only shrinks until it is empty.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "infra" / "cli"
ALLOWED = ("typer", "rich", "rolltape.infra.cli", "rolltape.infra.commands", "__future__")

#: CLI module -> what it imports outside the rule today.
_NOT_YET_MOVED: dict[str, set[str]] = {
    "__init__": {"rolltape.infra._gc"},
    "_common": {
        "pydantic",
        "pydantic_settings",
        "rolltape.infra",
        "rolltape.infra.settings",
        "rolltape.producers",
        "rolltape.schemas",
    },
    "bench": {
        "rolltape.infra.bench.batch",
        "rolltape.infra.bench.capture",
        "rolltape.infra.bench.capture_peer",
        "rolltape.infra.bench.cluster",
        "rolltape.infra.bench.evidence",
        "rolltape.infra.bench.export",
        "rolltape.infra.bench.judges",
        "rolltape.infra.bench.monitor",
        "rolltape.infra.bench.otlp",
        "rolltape.infra.bench.producer",
        "rolltape.infra.bench.prompts",
        "rolltape.infra.bench.replay",
        "rolltape.infra.bench.rules",
    },
}


def _outside_the_rule(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {
        name
        for name in names
        if name.split(".")[0] not in sys.stdlib_module_names
        and not any(name == a or name.startswith(a + ".") for a in ALLOWED)
    }


def test_a_cli_module_imports_nothing_new_outside_typer_rich_and_the_commands() -> None:
    grown = {
        path.stem: sorted(extra)
        for path in sorted(CLI.glob("*.py"))
        if (extra := _outside_the_rule(path) - _NOT_YET_MOVED.get(path.stem, set()))
    }
    assert grown == {}, "move this into infra/commands/ and import it from there"


def test_the_table_of_modules_not_yet_moved_only_shrinks() -> None:
    def gone(module: str, names: set[str]) -> set[str]:
        path = CLI / f"{module}.py"
        return names - _outside_the_rule(path) if path.exists() else names

    stale = {
        module: sorted(gone(module, names))
        for module, names in _NOT_YET_MOVED.items()
        if gone(module, names)
    }
    assert stale == {}, "these imports are gone: take them out of _NOT_YET_MOVED"

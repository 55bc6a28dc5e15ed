"""The rule of docs/architecture.md for `infra/cli/`: a CLI module parses arguments, calls a
command of `infra/commands/` and prints, so it imports typer, rich, the standard library, its own
package and `infra/commands/` only.

`infra/bench/` counts as commands: its modules are the commands of `rolltape bench` (they run a
benchmark and render its figures). Two modules are the CLI's boundary and import a little more,
each for the reason `_BOUNDARY` gives; a module may not gain an import outside the rule, and an
entry that is no longer imported must go.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "infra" / "cli"
ALLOWED = (
    "typer",
    "rich",
    "rolltape.infra.cli",
    "rolltape.infra.commands",
    "rolltape.infra.bench",
    "__future__",
)

#: CLI module -> (what it imports outside the rule, why).
_BOUNDARY: dict[str, tuple[set[str], str]] = {
    "__init__": (
        {"rolltape.infra._gc"},
        "the process's collector is tuned before any command runs",
    ),
    "_common": (
        {
            "pydantic",
            "pydantic_settings",
            "rolltape.infra",
            "rolltape.infra.settings",
            "rolltape.producers",
            "rolltape.schemas",
        },
        "the one error boundary: every package's root error (RolltapeError, pydantic's and the "
        "settings' errors) becomes one line and exit 2 here, the settings are read once, and the "
        "client library's own log lines are kept in the state folder",
    ),
}
_BOUNDARY_IMPORTS = {module: names for module, (names, _) in _BOUNDARY.items()}


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
        if (extra := _outside_the_rule(path) - _BOUNDARY_IMPORTS.get(path.stem, set()))
    }
    assert grown == {}, "move this into infra/commands/ and import it from there"


def test_the_boundary_table_names_no_import_that_is_gone() -> None:
    def gone(module: str, names: set[str]) -> set[str]:
        path = CLI / f"{module}.py"
        return names - _outside_the_rule(path) if path.exists() else names

    stale = {
        module: sorted(gone(module, names))
        for module, names in _BOUNDARY_IMPORTS.items()
        if gone(module, names)
    }
    assert stale == {}, "these imports are gone: take them out of _BOUNDARY"

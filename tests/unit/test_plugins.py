"""One plugin mechanism: every spec in configuration loads through `load_object` (or
`load_module`), every named extension point is a `Registry`, and their errors say what to fix."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from rolltape.processors.judges import JUDGES, REWARDS
from rolltape.producers.agent import _tools
from rolltape.producers.cron import _channels
from rolltape.producers.environments import _registry
from rolltape.schemas.plugins import (
    DuplicatePluginError,
    PluginError,
    PluginLoadError,
    Registry,
    UnknownPluginError,
    load_module,
    load_object,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "producers", "processors", "projections", "infra")


def test_load_object__returns_what_a_module_attr_spec_names() -> None:
    assert load_object("json:dumps", "encoder") is json.dumps


def test_load_object__a_dotted_attr_reaches_inside_the_object() -> None:
    assert load_object("json:JSONDecoder.decode", "decoder") is json.JSONDecoder.decode


@pytest.mark.parametrize("spec", ["json", "json:", ":dumps", "json:dumps.", "json:1x", ".json:x"])
def test_load_object__a_spec_of_bad_form_shows_a_valid_one(spec: str) -> None:
    message = f"runner {spec!r} must be 'package.module:function': a module to import, a colon"
    with pytest.raises(PluginLoadError, match=re.escape(message)):
        load_object(spec, "runner", what="function")


def test_load_object__a_module_that_does_not_import_is_named_with_its_cause() -> None:
    with pytest.raises(PluginLoadError) as caught:
        load_object("no_such_module_here:run", "runner")
    assert str(caught.value).startswith(
        "runner 'no_such_module_here:run': cannot import 'no_such_module_here': "
        "ModuleNotFoundError: No module named 'no_such_module_here'; is it installed, or on "
        "PYTHONPATH?"
    )
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_load_object__a_module_that_raises_while_importing_does_not_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rolltape_test_broken_plugin.py").write_text("raise RuntimeError('half done')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "rolltape_test_broken_plugin", raising=False)
    with pytest.raises(PluginLoadError, match="RuntimeError: half done; raised while importing it"):
        load_object("rolltape_test_broken_plugin:x", "environment")


def test_load_object__a_missing_attribute_says_which_part_is_missing() -> None:
    with pytest.raises(PluginLoadError, match=r"^runner 'json:nope': json has no function 'nope'$"):
        load_object("json:nope", "runner", what="function")
    with pytest.raises(
        PluginLoadError,
        match=re.escape(
            "judge 'json:JSONDecoder.nope': json has no object 'JSONDecoder.nope' "
            "(json.JSONDecoder has no attribute 'nope')"
        ),
    ):
        load_object("json:JSONDecoder.nope", "judge")


def test_load_object__its_errors_are_value_errors_under_the_plugin_root() -> None:
    """Callers that validate configuration catch ValueError; the CLI boundary catches roots."""
    with pytest.raises(PluginLoadError) as caught:
        load_object("json", "runner")
    assert isinstance(caught.value, PluginError) and isinstance(caught.value, ValueError)


def test_load_module__imports_a_module_by_name() -> None:
    assert load_module("json", "plugin module") is json


@pytest.mark.parametrize("name", ["", "a:b", "a..b", "no_such_module_here"])
def test_load_module__a_module_that_does_not_import_is_a_load_error(name: str) -> None:
    with pytest.raises(PluginLoadError, match=f"plugin module {re.escape(repr(name))}"):
        load_module(name, "plugin module")


def test_load_module__names_the_module_and_the_cause() -> None:
    with pytest.raises(
        PluginLoadError, match=r"^cannot import plugin module 'no_such_module_here': "
    ):
        load_module("no_such_module_here", "plugin module")


def test_registry__gives_what_was_registered_by_name() -> None:
    registry = Registry[int]("number")
    registry.register("one", 1)
    assert registry["one"] == 1
    assert "one" in registry and "two" not in registry
    assert registry.get("two") is None
    assert len(registry) == 1


def test_registry__refuses_a_second_plugin_under_a_taken_name() -> None:
    registry = Registry[int]("number")
    registry.register("one", 1)
    with pytest.raises(
        DuplicatePluginError,
        match=re.escape(
            "a number named 'one' is registered already (1); pass replace=True to replace it"
        ),
    ):
        registry.register("one", 2)
    assert registry["one"] == 1


def test_registry__replaces_a_plugin_when_asked() -> None:
    registry = Registry[int]("number")
    registry.register("one", 1)
    registry.register("one", 2, replace=True)
    assert registry["one"] == 2


def test_registry__an_unknown_name_lists_the_registered_ones() -> None:
    registry = Registry[int]("number")
    with pytest.raises(UnknownPluginError) as caught:
        registry["one"]
    assert str(caught.value) == "unknown number 'one': no number is registered"
    registry.register("two", 2)
    registry.register("one", 1)
    with pytest.raises(UnknownPluginError) as caught:
        registry["three"]
    assert str(caught.value) == "unknown number 'three': registered numbers are one, two"


def test_registry__an_unknown_name_is_a_key_error_and_a_value_error() -> None:
    """A key error for the `Mapping` contract (`get`, `in`), a value error for the callers
    that validate configuration."""
    with pytest.raises(UnknownPluginError) as caught:
        Registry[int]("number")["one"]
    assert all(isinstance(caught.value, c) for c in (PluginError, KeyError, ValueError))


def test_registry__iterates_its_names_sorted_whatever_the_registration_order() -> None:
    registry = Registry[int]("number")
    for name, value in (("b", 2), ("c", 3), ("a", 1)):
        registry.register(name, value)
    assert list(registry) == ["a", "b", "c"]
    assert dict(registry) == {"a": 1, "b": 2, "c": 3}


@pytest.mark.parametrize(
    ("registry", "shipped"),
    [
        (_channels._CHANNELS, {"file", "webhook"}),
        (_tools._TOOLSETS, {"files"}),
        (_registry._ENVIRONMENTS, {"bugfix"}),
        (REWARDS, {"task_pass", "final_reward", "composite"}),
        (JUDGES, {"answer_quality"}),
    ],
    ids=["channels", "toolsets", "environments", "rewards", "judges"],
)
def test_registries__each_extension_point_is_a_registry(
    registry: object, shipped: set[str]
) -> None:
    assert isinstance(registry, Registry)
    assert shipped <= set(registry)


def _module_functions(prefix: str) -> list[tuple[Path, ast.FunctionDef]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "tasks" in path.parts:
                continue  # the bug-fix environment's task projects are data, not the package
            for node in ast.parse(path.read_text(), str(path)).body:
                if isinstance(node, ast.FunctionDef) and node.name.startswith(prefix):
                    found.append((path.relative_to(ROOT), node))
    return found


def test_registries__every_register_function_registers_in_a_registry() -> None:
    """A `register_*` function that fills a dict of its own would be a sixth mechanism."""
    strays = [
        f"{path}:{node.name}"
        for path, node in _module_functions("register_")
        if not any(
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "register"
            for call in ast.walk(node)
        )
    ]
    assert strays == []


def test_loading__only_the_plugin_loader_imports_modules_by_name() -> None:
    """A second `module:attr` loader would be a second grammar and a second set of errors."""
    allowed = {
        Path("schemas/plugins/_loading.py"),  # the one loader
        Path("schemas/_accel.py"),  # the native codec, not a plugin
        Path("producers/_client_log.py"),  # client libraries' loggers, not plugins
    }
    importers = set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "tasks" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                name = node.attr if isinstance(node, ast.Attribute) else None
                name = node.id if isinstance(node, ast.Name) else name
                if name in {"import_module", "__import__"}:
                    importers.add(path.relative_to(ROOT))
    assert importers <= allowed


def test_plugins__are_not_loaded_by_reading_the_wire_format() -> None:
    import subprocess

    code = "import sys, rolltape.schemas; sys.exit('rolltape.schemas.plugins' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0

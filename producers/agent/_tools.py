"""Tools the reference agent can call: a declared spec plus the function that runs it.

A tool runs in the rollout's working directory: the file tools resolve every path inside it and
refuse one that leaves it, so a model cannot read or write elsewhere through them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rolltape.schemas import ToolSpec
from rolltape.schemas.plugins import Registry, UnknownPluginError


@dataclass(frozen=True)
class Tool:
    """A declared tool and its implementation (`fn(**arguments)`, sync or async)."""

    spec: ToolSpec
    fn: Callable[..., Any]

    @property
    def name(self) -> str:
        return self.spec.name

    async def __call__(self, arguments: dict[str, Any]) -> Any:
        result = self.fn(**arguments)
        if inspect.isawaitable(result):
            result = await result
        return result

    def openai(self) -> dict[str, Any]:
        """The tool as the chat completions API declares it."""
        return {
            "type": "function",
            "function": {
                "name": self.spec.name,
                "description": self.spec.description,
                "parameters": self.spec.parameters,
            },
        }


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


class Workdir:
    """Paths inside one rollout's working directory."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def path(self, relative: str) -> Path:
        target = (self.root / relative).resolve()
        if target != self.root and self.root not in target.parents:
            raise PermissionError(f"{relative!r} is outside the working directory")
        return target


def file_tools(root: Path) -> list[Tool]:
    """list_files, read_file and write_file, confined to `root`."""
    workdir = Workdir(root)

    def list_files() -> str:
        files = sorted(
            str(p.relative_to(workdir.root))
            for p in workdir.root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")
        )
        return "\n".join(files)

    def read_file(path: str) -> str:
        return workdir.path(path).read_text()

    def write_file(path: str, content: str) -> str:
        target = workdir.path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return f"wrote {len(content)} characters to {path}"

    return [
        Tool(
            ToolSpec(
                name="list_files",
                description="List the files of the working directory.",
                parameters=_object(),
            ),
            list_files,
        ),
        Tool(
            ToolSpec(
                name="read_file",
                description="Read a text file of the working directory.",
                parameters=_object(path={"type": "string"}),
            ),
            read_file,
        ),
        Tool(
            ToolSpec(
                name="write_file",
                description="Replace a text file of the working directory with new content.",
                parameters=_object(path={"type": "string"}, content={"type": "string"}),
            ),
            write_file,
        ),
    ]


class Toolset(Protocol):
    """What a skill names: builds the agent's tools for one rollout, bound to its working
    directory (as `file_tools` does). Register one with `register_toolset`."""

    def __call__(self, workdir: Path, /) -> Sequence[Tool]: ...


_TOOLSETS = Registry[Toolset]("toolset")
_TOOLSETS.register("files", file_tools)


def register_toolset(name: str, toolset: Toolset, *, replace: bool = False) -> None:
    """Make a skill name give the agent these tools (built from the rollout's workdir); a name
    that is taken is refused (`DuplicatePluginError`) unless `replace`."""
    _TOOLSETS.register(name, toolset, replace=replace)


def tools_for(skills: Iterable[str], workdir: Path) -> list[Tool]:
    """The tools of `skills`; `UnknownPluginError` (a ValueError) naming the registered
    toolsets for an unknown one."""
    tools: list[Tool] = []
    for skill in skills:
        if skill not in _TOOLSETS:
            raise UnknownPluginError(f"unknown skill {skill!r}: {_TOOLSETS.known()}")
        tools += _TOOLSETS[skill](workdir)
    return tools

"""The tools harness: a judge that grades inside the world the policy left.

It is the reference agent's loop (`run_agent`, captured like any agent) with the file tools over
the world and a `shell` tool that runs in a bubblewrap sandbox: the world at /world (its working
directory), the judge's run folder at /judge (its inputs, and where it writes `verdict.json`),
the system read-only, no network. The verdict is the file, validated against the spec's schema;
a judge that writes none, or an invalid one, is an error, never re-read from its prose. A
`verdict.json` in the run folder before the judge starts is deleted, and one in the world is
never read: the policy cannot plant a verdict.

Budgets are enforced between turns: the turn limit is the loop's, the token limit is checked
before each call from the usage the server reported, and the time limit bounds the whole run.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from rolltape.producers._errors import JudgeError
from rolltape.producers._session import Session
from rolltape.producers.agent import (
    Sandbox,
    SandboxLimits,
    file_tools,
    run_agent,
    sandbox_problem,
    shell_tool,
)
from rolltape.producers.judging._outcome import HarnessOutcome, add_usage, usage_of
from rolltape.schemas import VERDICT_FILE, JudgeSpec, VerdictError, parse_verdict

WORLD = "/world"
RUN_FOLDER = "/judge"
MAX_VERDICT_BYTES = 1 << 20


def tools_system(
    spec: JudgeSpec, absent: Sequence[str], *, world: str = WORLD, run_folder: str = RUN_FOLDER
) -> str:
    """The system message of a tools judge: where things are and what to write (`world` and
    `run_folder` as the judge's commands see them: fixed paths in the sandbox, the host's when
    the sandbox was opted out of)."""
    schema = orjson.dumps(spec.verdict_schema, option=orjson.OPT_SORT_KEYS).decode()
    missing = (
        "These files of the world were too large to keep and are absent: "
        + ", ".join(absent)
        + ".\n"
        if absent
        else ""
    )
    return (
        f"You are a judge. The world you grade is the working directory {world}, as the agent "
        "left it; your shell commands run there (in a sandbox without network). The file "
        f"tools take paths relative to {world}. Your inputs are in {run_folder}: task.json "
        "(the task), transcript.md (the agent's session) and trace.json (the same as data).\n"
        f"{missing}"
        "Investigate as the request asks (read the files, run the tests), then write your "
        f"verdict to {run_folder}/{VERDICT_FILE} with the shell: one JSON object valid against "
        f"this JSON Schema.\n{schema}\nWhen the file is written, reply with one sentence."
    )


class _Budgeted:
    """The judge's client, checked before each call against its token budget, with what the
    calls spent summed; an endpoint failure is the judge's (JudgeError)."""

    def __init__(self, client: Any, tokens: int) -> None:
        self.chat = self
        self.completions = self
        self._client = client
        self._tokens = tokens
        self.usage: dict[str, int] = {}
        self.model: str | None = None

    async def create(self, **kwargs: Any) -> Any:
        import openai

        spent = self.usage.get("total_tokens", 0)
        if spent >= self._tokens:
            raise JudgeError(f"the judge spent {spent} tokens, over its budget of {self._tokens}")
        try:
            completion = await self._client.chat.completions.create(**kwargs)
        except openai.APIError as exc:
            raise JudgeError(
                f"the model endpoint failed: {type(exc).__name__}: {exc}"[:500]
            ) from exc
        add_usage(self.usage, usage_of(completion))
        self.model = completion.model or self.model
        return completion


async def run_tools(
    spec: JudgeSpec,
    client: Any,
    model: str,
    *,
    session: Session,
    world: Path,
    run_folder: Path,
    absent: Sequence[str] = (),
    limits: SandboxLimits | None = None,
    unsandboxed: bool = False,
    family: str | None = None,
) -> HarnessOutcome:
    """Run the judge's loop in `world` with its inputs in `run_folder`; the verdict is the
    `verdict.json` it writes there. Raises JudgeError for every way of not getting one."""
    if not unsandboxed and (problem := sandbox_problem()) is not None:
        raise JudgeError(
            f"a tools judge runs its shell in a sandbox, and {problem} (opting out runs it "
            "unsandboxed: ROLLTAPE_TOOLS_UNSANDBOXED=1)"
        )
    verdict_file = run_folder / VERDICT_FILE
    verdict_file.unlink(missing_ok=True)  # whatever put it there, it is not this judge's
    sandbox = Sandbox(world, limits, binds={RUN_FOLDER: run_folder}, unsandboxed=unsandboxed)
    # Unsandboxed, nothing is mounted: the judge is told the host's paths.
    seen_world, seen_run = (WORLD, RUN_FOLDER) if not unsandboxed else (str(world), str(run_folder))
    budgeted = _Budgeted(client, spec.agent.budget.tokens)
    result = await run_agent(
        budgeted,
        model,
        spec.prompt,
        [*file_tools(world), shell_tool(sandbox)],
        session=session,
        system=tools_system(spec, absent, world=seen_world, run_folder=seen_run),
        max_iterations=spec.agent.budget.turns,
        temperature=spec.agent.temperature,
        seed=spec.agent.seed,
        family=family,
    )
    spent = budgeted.usage.get("total_tokens", 0)
    if spent > spec.agent.budget.tokens:
        raise JudgeError(
            f"the judge spent {spent} tokens, over its budget of {spec.agent.budget.tokens}"
        )
    try:
        source = _read_verdict(verdict_file)
    except FileNotFoundError:
        raise JudgeError(
            f"the judge wrote no {RUN_FOLDER}/{VERDICT_FILE} ({result.iterations} turns, "
            f"{'it answered' if result.stop == 'answered' else 'turn budget spent'})"
        ) from None
    except OSError as exc:  # a link, a folder, too large: not a verdict file
        raise JudgeError(f"{RUN_FOLDER}/{VERDICT_FILE} cannot be read as a verdict: {exc}") from exc
    try:
        verdict = parse_verdict(source.decode(errors="replace"), spec.verdict)
    except VerdictError as exc:
        raise JudgeError(f"{VERDICT_FILE} is not a verdict: {exc}"[:500]) from exc
    return HarnessOutcome(
        verdict=verdict,
        source=source,
        model=budgeted.model or model,
        usage=budgeted.usage,
        turns=result.iterations,
    )


def _read_verdict(path: Path) -> bytes:
    """The verdict file's bytes: a regular file (a link is not followed) of at most 1 MiB."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        data = os.read(fd, MAX_VERDICT_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_VERDICT_BYTES:
        raise OSError(f"{path.name} is larger than {MAX_VERDICT_BYTES} bytes")
    return data

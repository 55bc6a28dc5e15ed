"""The reference environment: small Python projects with a bug, fixed with file tools.

Each task (shipped in `tasks/<id>/`) is a module with a bug, its tests and a description. A
rollout's working directory gets a copy; the agent reads and edits it with the file tools. The
reward is the article's: `0.6 + 0.4 * coverage` when the tests pass, 0 when they do not, where
the tests are the shipped ones (restored before scoring, so editing a test does not pass it) plus
any test files the agent added, and coverage is the line coverage of the task's module. It is a
composite reward (components `tests_pass` and `coverage`), so the `composite` reward function
recomputes it on replay.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from rolltape.producers.agent import AgentResult
from rolltape.producers.environments._base import (
    Environment,
    Item,
    RewardResult,
    RolloutContext,
    composite,
)
from rolltape.producers.environments.bugfix._review import (
    REVIEW_VERSION,
    judged_reward,
    review_spec,
)
from rolltape.schemas import JudgeSpec, Verdict

_PYTEST_INI = "[pytest]\naddopts = -q -p no:cacheprovider\n"
_TIMEOUT_S = 120.0
_OUTPUT_CHARS = 2000


def _tasks_root() -> Path:
    return Path(str(resources.files("rolltape.producers.environments.bugfix") / "tasks"))


class BugFixEnv(Environment):
    """`bugfix`: one item per task folder under `root` (the shipped tasks unless given), in the
    split its task.json names, rewarded as described above. Scoring runs pytest under coverage
    in a subprocess of this interpreter, which needs `pytest` and `coverage` (the `env` extra)."""

    name = "bugfix"
    system_prompt = (
        "You fix bugs in small Python projects. Use the tools to read the code and its tests, "
        "then write the corrected module. Do not change the tests. When you are done, answer "
        "with one sentence saying what was wrong."
    )
    max_iterations = 12
    group_size = 4
    pass_reward = 0.6  # the tests pass: 0.6 + 0.4 * coverage

    judged: ClassVar[bool] = False
    """With a tools judge reviewing every fix whose tests pass (`BugFixJudgedEnv`)."""

    def __init__(self, root: Path | None = None) -> None:
        super().__init__()
        self.root = root or _tasks_root()
        self._items = [self._item(folder) for folder in sorted(self.root.iterdir())]

    def _item(self, folder: Path) -> Item:
        task: dict[str, Any] = json.loads((folder / "task.json").read_text())
        tests = sorted(p.name for p in folder.glob("test_*.py"))
        return Item(
            item_id=folder.name,
            split=task["split"],
            data={"module": task["module"], "description": task["description"], "tests": tests},
        )

    def items(self, split: str = "train") -> list[Item]:
        return [item for item in self._items if item.split == split]

    def format_prompt(self, item: Item) -> str:
        return (
            f"{item.data['description']}\n\nThe code is in {item.data['module']}.py, the tests "
            f"in {', '.join(item.data['tests'])}. Fix the bug so the tests pass."
        )

    def setup_workdir(self, item: Item, workdir: Path) -> None:
        for path in (self.root / item.item_id).iterdir():
            if path.is_file() and path.name != "task.json":
                shutil.copyfile(path, workdir / path.name)

    async def compute_reward(
        self, item: Item, result: AgentResult, ctx: RolloutContext
    ) -> RewardResult:
        workdir = ctx.workdir
        for test in item.data["tests"]:  # the shipped tests, whatever the agent did to them
            shutil.copyfile(self.root / item.item_id / test, workdir / test)
        (workdir / "pytest.ini").write_text(_PYTEST_INI)
        module = item.data["module"]
        code, output = await _run(
            workdir, "-m", "coverage", "run", f"--source={module}", "-m", "pytest"
        )
        coverage = 0.0
        if (workdir / ".coverage").exists():
            report_code, _ = await _run(workdir, "-m", "coverage", "json", "-o", "cov.json")
            if report_code == 0:
                totals = json.loads((workdir / "cov.json").read_text())["totals"]
                coverage = float(totals["percent_covered"]) / 100.0
        passed = code == 0
        return composite(
            {
                "tests_pass": (0.6, 1.0 if passed else 0.0),
                "coverage": (0.4, coverage if passed else 0.0),
            },
            passed=passed,
            coverage=round(coverage, 4),
            pytest_exit=code,
            pytest_output=output[-_OUTPUT_CHARS:],
        )

    def judges(self, item: Item, result: AgentResult, reward: RewardResult) -> list[JudgeSpec]:
        """The fix review, when judged and the tests pass (a failing run is settled at 0; the
        test run's component decides, so a replay of a judged reward decides alike)."""
        if not self.judged or reward.components.get("tests_pass") != 1.0:
            return []
        return [review_spec(item, self.root / item.item_id)]

    def combine(
        self, item: Item, reward: RewardResult, verdicts: Mapping[str, Verdict]
    ) -> RewardResult:
        review = verdicts.get("fix_review")
        return reward if review is None else judged_reward(reward, review)


class BugFixJudgedEnv(BugFixEnv):
    """`bugfix-judged`: the bug-fix environment with a tools judge (`fix_review`) reviewing
    every fix whose tests pass, inside the world the agent left; its review is a third
    component of the reward (rolltape.producers.environments.bugfix._review)."""

    name = "bugfix-judged"
    judged = True
    judge_versions: ClassVar[Mapping[str, str]] = {"fix_review": REVIEW_VERSION}


async def _run(workdir: Path, *args: str) -> tuple[int, str]:
    """Run this interpreter in `workdir`; (exit code, output). A run past the timeout is
    killed and counts as failing."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        # Nothing of the caller leaks in (ROLLTAPE_*, PYTEST_*): only where programs are.
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), _TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        return 124, f"timed out after {_TIMEOUT_S:.0f} s"
    return process.returncode or 0, out.decode(errors="replace")

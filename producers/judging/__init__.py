"""rolltape.producers.judging: judges as agents, run.

A `JudgeSpec` (rolltape.schemas) says who a judge is and what it returns; `JudgeRuntime` runs
specs for every caller (an environment's runner, the worker, a replay), each run recorded as a
session of its own, every failure an error verdict. The `null` harness is the single-call
judge; the `tools` harness grades inside the world the policy left, its shell in a sandbox.
`run_judges` places a rollout's judges (in the live world in turn, or in clean-room copies at
once) so that all of them read the one recorded world.
"""

from rolltape.producers.judging._inputs import (
    INPUT_FILES,
    JudgeInputs,
    WorldView,
    render_messages,
)
from rolltape.producers.judging._null import reply_format
from rolltape.producers.judging._placement import RecordedWorld, run_judges
from rolltape.producers.judging._runtime import JudgeRuntime
from rolltape.producers.judging._tools import tools_system

__all__ = [
    "INPUT_FILES",
    "JudgeInputs",
    "JudgeRuntime",
    "RecordedWorld",
    "WorldView",
    "render_messages",
    "reply_format",
    "run_judges",
    "tools_system",
]

"""rolltape.producers.agent: the reference agent (a chat model with tools) and its toolsets.

`run_agent` drives an OpenAI-compatible model captured by a session until it answers or runs
out of iterations, feeding tool errors back to the model (`rolltape.producers.cron.agent_runner`
makes it cron's default runner). Skills name toolsets (`files` is built in; `register_toolset`
adds others). `shell_tool` runs commands in a bubblewrap `Sandbox` (refusing where there is
none, unless the caller opts out).
"""

from rolltape.producers.agent._loop import DEFAULT_MODEL, AgentResult, run_agent
from rolltape.producers.agent._sandbox import (
    Sandbox,
    SandboxLimits,
    SandboxResult,
    sandbox_problem,
    shell_tool,
)
from rolltape.producers.agent._tools import Tool, Toolset, file_tools, register_toolset, tools_for

__all__ = [
    "DEFAULT_MODEL",
    "AgentResult",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "Tool",
    "Toolset",
    "file_tools",
    "register_toolset",
    "run_agent",
    "sandbox_problem",
    "shell_tool",
    "tools_for",
]

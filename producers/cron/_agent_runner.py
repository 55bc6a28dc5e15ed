"""The reference agent as cron's default runner.

A job's `model` names a logical model (default `agent`) that settings bind to an
OpenAI-compatible endpoint; its skills name toolsets (`files` is built in: list, read and write
files in the job's workdir). How an attempt ends:

- the model answered: success, its answer delivered;
- the loop ran out of iterations: needs human review (the run did something, not to the end);
- the endpoint failed to connect, timed out, was rate limited or erred on its side: retryable;
- it refused the credentials or the request: terminal (retrying will not help);
- no endpoint is bound to the model, or a skill is unknown: terminal, saying which.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rolltape.producers.agent import DEFAULT_MODEL, run_agent, tools_for
from rolltape.producers.cron._routing import RunOutcome
from rolltape.producers.cron._runs import CronRunContext, Runner
from rolltape.schemas import RunStatus
from rolltape.schemas.clients import ModelEndpoint

SYSTEM = (
    "You are an agent started by a scheduled job. Use the tools to do the task in the working "
    "directory, then answer with a short report of what you found or did."
)


def agent_runner(endpoints: Mapping[str, ModelEndpoint], *, max_iterations: int = 10) -> Runner:
    """A runner that drives the reference agent with the endpoint each job's model names (one
    client per endpoint, shared by the runs: building one costs tens of milliseconds)."""
    clients: dict[str, Any] = {}

    async def run(context: CronRunContext) -> RunOutcome:
        logical = context.job.model or DEFAULT_MODEL
        endpoint = endpoints.get(logical)
        if endpoint is None:
            bound = ", ".join(sorted(endpoints)) or "none"
            return RunOutcome(
                status=RunStatus.TERMINAL_FAILURE,
                reason=f"no endpoint is bound to model {logical!r} (bound: {bound}); set "
                f'ROLLTAPE_MODELS=\'{{"{logical}": {{"base_url": ..., "model": ...}}}}\'',
            )
        try:
            tools = tools_for(context.job.skills, context.workdir or Path.cwd())
        except ValueError as exc:
            return RunOutcome(status=RunStatus.TERMINAL_FAILURE, reason=str(exc))
        if logical not in clients:
            clients[logical] = endpoint.async_client()
        client = context.session.capture(
            clients[logical], family=endpoint.family, model_version=endpoint.version
        )
        try:
            result = await run_agent(
                client,
                endpoint.model,
                context.prompt,
                tools,
                session=context.session,
                system=SYSTEM,
                max_iterations=max_iterations,
                family=endpoint.family,
            )
        except Exception as exc:
            return RunOutcome(status=_status_of(exc), reason=f"{type(exc).__name__}: {exc}")
        if result.stop == "max_iterations":
            return RunOutcome(
                status=RunStatus.NEEDS_HUMAN_REVIEW,
                reason=f"no answer after {result.iterations} iterations "
                f"({result.tool_calls} tool calls, {result.tool_errors} failed)",
                output=result.final,
            )
        return RunOutcome(output=result.final)

    return run


def _status_of(exc: Exception) -> RunStatus:
    """Whether an endpoint's failure is worth another attempt."""
    import openai

    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return RunStatus.TERMINAL_FAILURE
    if isinstance(exc, openai.BadRequestError | openai.NotFoundError):
        return RunStatus.TERMINAL_FAILURE
    return RunStatus.RETRYABLE_FAILURE

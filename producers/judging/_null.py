"""The null harness: the single-call judge. No tools; the evidence rides in the spec's prompt and
the one reply is the verdict (one JSON object, a fenced block tolerated).

The call asks for structured output (the verdict model's strict JSON Schema), which servers with
guided decoding honour; the reply is still parsed here, not by the client, so a server that
wraps the object in a ```json fence is read as the verdict it is, and anything else is refused
with the reason.
"""

from __future__ import annotations

from typing import Any

from rolltape.producers._errors import JudgeError
from rolltape.producers.judging._outcome import HarnessOutcome, usage_of
from rolltape.schemas import JudgeSpec, VerdictError, parse_verdict


def reply_format(spec: JudgeSpec) -> str:
    """The system message: what the reply must be. The criteria are the spec's prompt."""
    import orjson

    schema = orjson.dumps(spec.verdict_schema, option=orjson.OPT_SORT_KEYS).decode()
    return (
        "You are a judge. Read the request and give your verdict. Reply with the verdict only: "
        f"one JSON object valid against this JSON Schema, nothing before or after it.\n{schema}"
    )


async def run_null(spec: JudgeSpec, client: Any, model: str) -> HarnessOutcome:
    """One call; the reply is the verdict. `client` is a (captured) `openai.AsyncOpenAI`.
    Raises JudgeError for every way of not getting a valid verdict."""
    import openai
    from openai.lib._parsing._completions import type_to_response_format_param

    messages = [
        {"role": "system", "content": reply_format(spec)},
        {"role": "user", "content": spec.prompt},
    ]
    try:
        completion = await client.chat.completions.create(
            model=model,
            messages=messages,
            response_format=type_to_response_format_param(spec.verdict),
            temperature=spec.agent.temperature,
            seed=spec.agent.seed,
        )
    except openai.APIError as exc:
        raise JudgeError(f"the model endpoint failed: {type(exc).__name__}: {exc}"[:500]) from exc
    usage = usage_of(completion)
    if usage.get("total_tokens", 0) > spec.agent.budget.tokens:
        raise JudgeError(
            f"the judge spent {usage['total_tokens']} tokens, over its budget of "
            f"{spec.agent.budget.tokens}"
        )
    if not completion.choices:
        raise JudgeError("the reply has no choices")
    choice = completion.choices[0]
    message = choice.message
    if getattr(message, "refusal", None):
        raise JudgeError(f"the model refused: {message.refusal}"[:500])
    if choice.finish_reason == "length":
        raise JudgeError("the model stopped at its length limit before a verdict")
    text = message.content or ""
    try:
        verdict = parse_verdict(text, spec.verdict)
    except VerdictError as exc:
        raise JudgeError(f"the reply is not a verdict: {exc}"[:500]) from exc
    return HarnessOutcome(
        verdict=verdict,
        source=text.encode(),
        model=completion.model or model,
        usage=usage,
        turns=1,
    )

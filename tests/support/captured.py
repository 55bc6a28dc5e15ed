"""A reply as a captured client against vLLM records it, for the tests of token samples on a
real broker: the prompt's ids as the engine saw them, the sampled ids and their logprobs."""

from __future__ import annotations

from rolltape.producers import Session


def captured_exchange(session: Session, i: int) -> None:
    """The user's question and the reply to it, with exact ids (different for each `i`)."""
    session.turn("user", f"count to {i}")
    session.turn(
        "assistant",
        f"{i}",
        prompt_token_ids=[1, 2, 3 + i],
        token_ids=[40 + i, 2],
        logprobs=[-0.5, -0.01],
        finish_reason="stop",
    )

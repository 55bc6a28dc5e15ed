"""Logical model names bound to OpenAI-compatible endpoints.

Why here: judges (processors) and decision policies (producers) both name a logical model
("grader", "policy") that settings bind to an endpoint; neither may import the other, so the
binding and the one way to build a client from it live at the bottom of the dependency order.
The `openai` package is imported only when a client is built (it is an optional extra).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ModelEndpoint(BaseModel):
    """Where a logical model name points."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    model: str
    api_key: str = "not-needed"
    timeout_s: float = Field(default=60.0, gt=0)

    def client(self) -> Any:
        """An `openai.OpenAI` client for this endpoint."""
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s)

    def async_client(self) -> Any:
        """An `openai.AsyncOpenAI` client for this endpoint."""
        import openai

        return openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s
        )

"""Logical model names bound to OpenAI-compatible endpoints.

Why here: judges (processors) and decision policies (producers) both name a logical model
("grader", "policy") that settings bind to an endpoint; neither may import the other, so the
binding and the one way to build a client from it live at the bottom of the dependency order.
The `openai` package is imported only when a client is built (it is an optional extra).

Invariant: the API key is a `SecretStr`. It shows as '**********' in reprs, logs and ordinary
dumps, and is unwrapped in two places only: where an openai client is built, and in
`to_config()`, which hands the endpoint to another process on purpose.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    SerializationInfo,
    field_serializer,
)

#: The dump context under which the API key is dumped itself rather than masked. It reaches
#: endpoints nested in other models too (`settings.model_dump(mode="json", context=...)`).
#: For handing endpoints to a child process, never for printing.
REVEAL_SECRETS: dict[str, bool] = {"reveal_secrets": True}


class ModelEndpoint(BaseModel):
    """Where a logical model name points. Its repr and dumps never show the API key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    model: str
    api_key: SecretStr = SecretStr("not-needed")
    """The server's key; local servers (vLLM, llama.cpp) ignore it, so it has a placeholder."""
    timeout_s: float = Field(default=60.0, gt=0)
    family: str | None = None
    """The model family whose tool-call text format the reply is parsed with, for a server that
    returns calls as text (no tool parser enabled): one of rolltape.producers.parsing.FAMILIES,
    checked when the settings are read and where the client is captured. None: the server
    returns structured calls."""
    version: str | None = None
    """The version of the model this endpoint serves (a training run's checkpoint, by the name
    its lineage records): captured replies carry it, so every sample names the model that
    sampled it. None: not known."""

    @field_serializer("api_key")
    def _api_key(self, key: SecretStr, info: SerializationInfo) -> SecretStr | str:
        # A JSON dump masks the key (pydantic's default) unless the caller asked for it: the
        # JSON form is what ROLLTAPE_MODELS takes, so a masked key would silently break a child.
        if info.context is not None and info.context.get("reveal_secrets"):
            return key.get_secret_value()
        return key if info.mode == "python" else str(key)

    def to_config(self) -> dict[str, Any]:
        """The JSON form ROLLTAPE_MODELS takes for this endpoint, API key included: how an
        endpoint travels to a child process (`json.dumps({"grader": e.to_config()})`)."""
        return self.model_dump(mode="json", context=REVEAL_SECRETS)

    def client(self) -> Any:
        """An `openai.OpenAI` client for this endpoint."""
        import openai

        return openai.OpenAI(
            base_url=self.base_url,
            api_key=self.api_key.get_secret_value(),
            timeout=self.timeout_s,
        )

    def async_client(self) -> Any:
        """An `openai.AsyncOpenAI` client for this endpoint."""
        import openai

        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self.api_key.get_secret_value(),
            timeout=self.timeout_s,
        )

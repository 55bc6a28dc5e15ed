"""Redaction: what a recorder drops, hashes or masks in each event before it leaves the process.

A policy is a list of rules, each naming one payload field of one event type (`turn.content`,
`tool_call.arguments`, `*.content` for every type that has the field), optionally only where
other fields of the payload have given values (`where = {role = "system"}`), and an action:

- `drop`: the value goes; the field keeps its default (None, an empty dict or tuple), or the
  empty string where the field is a required text (a turn's content);
- `hash`: each text in the value is replaced by its HMAC-SHA256 under the project's secret,
  `hmac-sha256:<hex>`: equal texts stay equal (a system prompt can still be grouped by), but
  without the secret a hash cannot be tested against guesses (an unsalted hash of an email is
  still the email to anyone with a list of addresses);
- `mask`: emails, phone numbers and API keys or tokens in each text are replaced by `[email]`,
  `[phone]`, `[secret]` (see _patterns.py).

The recorder applies it in the record call, on the caller's thread: nothing unredacted reaches
the sender, its processes, the spool or the broker. Rules are checked against the payload
models when the policy is made: a rule naming a field that does not exist is an error, not a
rule that silently redacts nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretBytes,
    ValidationError,
    model_validator,
)

from rolltape.producers._errors import ProducerError
from rolltape.producers.privacy._patterns import PATTERNS, Pattern, masker
from rolltape.schemas import PAYLOAD_MODELS


class RedactionError(ProducerError):
    """A redaction policy that cannot be applied as written; the message says what to change."""


class RedactionRule(BaseModel):
    """One field of one event type (or of every type that has it: `*.content`), and what
    happens to it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    field: str = Field(pattern=r"^(\*|[a-z_]+)\.[a-z_]+$")
    action: Literal["drop", "hash", "mask"]
    where: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    """Only payloads whose fields equal these values (`{"role": "system"}`)."""
    patterns: tuple[Pattern, ...] = PATTERNS
    """What `mask` looks for."""


class Redaction(BaseModel):
    """A recorder's redaction policy. `secret` keys the hashes: keep it as you keep other
    credentials, and share it between the machines whose hashes must agree."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: tuple[RedactionRule, ...] = ()
    secret: SecretBytes | None = None
    phone_region: str | None = "US"
    """Where national phone formats are read from (ISO 3166 code); international numbers (+44
    ...) are found whatever it says; None finds only those."""

    _redactor: Redactor = PrivateAttr()

    @model_validator(mode="after")
    def _compiled(self) -> Redaction:
        if self.secret is None and any(r.action == "hash" for r in self.rules):
            raise ValueError("a hash rule needs the project's secret (`secret`)")
        if self.secret is not None and len(self.secret.get_secret_value()) < 16:
            raise ValueError("the secret must be at least 16 bytes")
        self._redactor = Redactor(self)  # RedactionError: a rule names what does not exist
        return self

    @classmethod
    def from_file(
        cls, path: Path, *, secret: bytes | Callable[[], bytes] | None = None
    ) -> Redaction:
        """A policy written as TOML: `phone_region = "GB"` and `[[rule]]` tables with `field`,
        `action`, and optionally `where` and `patterns`. `secret` may be a function, called
        only when a rule hashes."""
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise RedactionError(f"cannot read the redaction policy {path}: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise RedactionError(f"the redaction policy {path} is not valid TOML: {exc}") from exc
        rules = data.pop("rule", [])
        if callable(secret):
            hashes = any(isinstance(r, dict) and r.get("action") == "hash" for r in rules)
            secret = secret() if hashes else None
        try:
            return cls.model_validate({"rules": rules, "secret": secret, **data})
        except ValidationError as exc:
            raise RedactionError(f"the redaction policy {path} is not valid: {exc}") from exc
        except RedactionError as exc:
            raise RedactionError(f"the redaction policy {path}: {exc}") from exc

    def apply(self, event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload as the policy leaves it: a new dict where a rule changed it, the caller's
        own otherwise (never changed in place)."""
        return self._redactor.apply(event_type, payload)


_Edit = Callable[[Any], Any]


class Redactor:
    """A policy compiled for the record call, when the policy is made: per event type, the
    edits of its fields."""

    def __init__(self, policy: Redaction) -> None:
        secret = policy.secret.get_secret_value() if policy.secret is not None else b""
        self._by_type: dict[str, list[tuple[str, Mapping[str, Any], _Edit]]] = {}
        for rule in policy.rules:
            kind, name = rule.field.split(".")
            if kind == "*":
                types = [t for t, m in PAYLOAD_MODELS.items() if name in m.model_fields]
                if not types:
                    raise RedactionError(
                        f"redaction rule {rule.field!r}: no event type has a field {name!r}"
                    )
            elif kind in PAYLOAD_MODELS:
                types = [kind]
            else:
                raise RedactionError(
                    f"redaction rule {rule.field!r}: no event type {kind!r}; event types: "
                    + ", ".join(sorted(PAYLOAD_MODELS))
                )
            for event_type in types:
                model = PAYLOAD_MODELS[event_type]
                info = model.model_fields.get(name)
                if info is None:
                    raise RedactionError(
                        f"redaction rule {rule.field!r}: {event_type} has no field {name!r}; its "
                        "fields: " + ", ".join(model.model_fields)
                    )
                for key in rule.where:
                    if key not in model.model_fields:
                        raise RedactionError(
                            f"redaction rule {rule.field!r}: `where` names {key!r}, which "
                            f"{event_type} does not have"
                        )
                edit = self._edit(rule, info, secret, policy.phone_region, event_type, name)
                self._by_type.setdefault(event_type, []).append((name, rule.where, edit))

    @staticmethod
    def _edit(
        rule: RedactionRule,
        info: Any,
        secret: bytes,
        phone_region: str | None,
        event_type: str,
        name: str,
    ) -> _Edit:
        if rule.action == "drop":
            if info.is_required():
                if info.annotation is not str:
                    raise RedactionError(
                        f"redaction rule {rule.field!r}: {event_type}.{name} is required and not "
                        "a text, so it cannot be dropped"
                    )
                return lambda value: ""
            return lambda value: info.get_default(call_default_factory=True)
        if rule.action == "hash":

            def keyed(text: str) -> str:
                digest = hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()
                return f"hmac-sha256:{digest}"

            return lambda value: _texts(value, keyed)
        mask = masker(rule.patterns, phone_region)
        return lambda value: _texts(value, mask)

    def apply(self, event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload as the policy leaves it: a new dict where a rule changed it, the caller's
        own otherwise (never changed in place)."""
        edits = self._by_type.get(event_type)
        if not edits:
            return payload
        out = payload
        for name, where, edit in edits:
            value = out.get(name)
            if value is None or any(out.get(k) != v for k, v in where.items()):
                continue
            if out is payload:
                out = dict(payload)
            out[name] = edit(value)
        return out


def _texts(value: Any, change: Callable[[str], str]) -> Any:
    """`value` with every text in it changed (dict keys stay: they are a tool's parameter names,
    not what the user said)."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {k: _texts(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_texts(v, change) for v in value)
    return value

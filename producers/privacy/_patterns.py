"""What `mask` finds in text: email addresses, phone numbers, API keys and tokens.

Phone numbers are found by `phonenumbers` (Google's libphonenumber metadata, kept current with
every country's numbering plan): a regular expression for phone numbers either misses national
formats or masks dates, amounts and ids. Emails and secrets are regular expressions: an address
is a well-defined shape, and the secrets are the documented prefixes of the common providers'
keys (detect-secrets has the same kind of list, but scans files through global settings and a
plugin registry, and its keyword and entropy plugins flag ordinary prose; both stay in a table
here that a policy can name and a test pins).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

Pattern = Literal["email", "phone", "secret"]
PATTERNS: tuple[Pattern, ...] = ("email", "phone", "secret")

EMAIL = re.compile(
    r"[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)

SECRETS: dict[str, tuple[tuple[str, ...], str]] = {
    # provider: (a literal every key of it contains, for a cheap first look; its shape)
    "openai / anthropic": (("sk-",), r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"),
    "aws access key id": (("AKIA", "ASIA"), r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "github token": (("gh", "github_pat_"), r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,})"),
    "slack token": (("xox",), r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    "google api key": (("AIza",), r"\bAIza[0-9A-Za-z_-]{35}"),
    "stripe key": (("_live_", "_test_"), r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}"),
    "hugging face token": (("hf_",), r"\bhf_[A-Za-z0-9]{30,}"),
    "json web token": (("eyJ",), r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}"),
    "bearer token": (
        ("Bearer", "bearer", "BEARER"),
        r"(?i:\bbearer\s+)(?=[\w.~+/-]{16})[\w~+/-]+(?:\.[\w~+/-]+)*=*",
    ),
    "private key block": (
        ("PRIVATE KEY-----",),
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    ),
}
_SECRETS = [(literals, re.compile(shape)) for literals, shape in SECRETS.values()]
_DIGIT = re.compile(r"\d")


def _mask_secrets(text: str) -> str:
    for literals, shape in _SECRETS:
        if any(literal in text for literal in literals):
            text = shape.sub("[secret]", text)
    return text


def _mask_emails(text: str) -> str:
    return EMAIL.sub("[email]", text) if "@" in text else text


def masker(patterns: tuple[Pattern, ...], phone_region: str | None) -> Callable[[str], str]:
    """A function that replaces each match of `patterns` in a text by `[email]`, `[phone]` or
    `[secret]`. Secrets first (a token may contain an @), then emails, then phone numbers (an
    email's digits are gone by then)."""
    steps: list[Callable[[str], str]] = []
    if "secret" in patterns:
        steps.append(_mask_secrets)
    if "email" in patterns:
        steps.append(_mask_emails)
    if "phone" in patterns:
        steps.append(_phone_masker(phone_region))

    def mask(text: str) -> str:
        for step in steps:
            text = step(text)
        return text

    return mask


def _phone_masker(region: str | None) -> Callable[[str], str]:
    import phonenumbers

    def mask(text: str) -> str:
        if _DIGIT.search(text) is None:
            return text  # the matcher's own setup costs more than this look
        found = [(m.start, m.end) for m in phonenumbers.PhoneNumberMatcher(text, region)]
        if not found:
            return text
        parts, at = [], 0
        for start, end in found:
            parts += [text[at:start], "[phone]"]
            at = end
        parts.append(text[at:])
        return "".join(parts)

    return mask

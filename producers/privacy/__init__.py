"""Privacy in the recording SDK: what a recorder redacts before anything leaves the process.

(Issue 32's per-session encryption and erasure will live here too; not built yet.)
"""

from rolltape.producers.privacy._patterns import PATTERNS, SECRETS, Pattern
from rolltape.producers.privacy._redaction import (
    Redaction,
    RedactionError,
    RedactionRule,
    Redactor,
)

__all__ = [
    "PATTERNS",
    "SECRETS",
    "Pattern",
    "Redaction",
    "RedactionError",
    "RedactionRule",
    "Redactor",
]

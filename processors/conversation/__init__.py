"""The conversation of an agent session, read once for every view: the export fold, the reward
filters and the judges' transcript."""

from rolltape.processors.conversation._conversation import (
    EVENT_TYPES,
    Conversation,
    Reader,
    View,
    read,
    tool_failed,
)

__all__ = ["EVENT_TYPES", "Conversation", "Reader", "View", "read", "tool_failed"]

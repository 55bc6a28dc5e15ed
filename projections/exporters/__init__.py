"""Exporters: pure functions from a Trajectory to the formats trainers read.

Each module documents its format with an example line; `FORMATS` names what `rolltape dataset export`
offers.
"""

from collections.abc import Iterable
from typing import Any

from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters._atropos import (
    IGNORE,
    AtroposExport,
    ChatTokenizer,
    SkipSession,
    TokenizerError,
    atropos_groups,
    load_tokenizer,
    templated_tokens,
    tokens_and_masks,
)
from rolltape.projections.exporters._compress import (
    CompressionReport,
    compress,
    estimate_tokens,
    trajectory_tokens,
)
from rolltape.projections.exporters._dpo import DpoExport, dpo_pairs
from rolltape.projections.exporters._jsonl import jsonl_line
from rolltape.projections.exporters._openai import chat_messages, openai_row, trl_row
from rolltape.projections.exporters._sharegpt import (
    ParsedCall,
    ParsedMessage,
    ParsedResponse,
    ParsedRow,
    ShareGPTFormatError,
    parse_gpt_value,
    parse_sharegpt_row,
    parse_system_value,
    parse_tool_value,
    sharegpt_row,
    tools_json,
)
from rolltape.projections.exporters._stacks import STACKS, Stack, stack_row, stack_rows
from rolltape.projections.exporters._tags import escape, unescape
from rolltape.projections.exporters._tokens import TokenSample, TokenSource, token_samples
from rolltape.projections.exporters._turns import turn_lines

#: Formats of `rolltape dataset export`; atropos lines are per group, dpo lines per pair in a group,
#: tokens lines per branch of a session, the others per session (turns: per assistant turn).
FORMATS = ("sharegpt", "atropos", "turns", "openai", "trl", "dpo", "tokens")


def session_rows(
    format: str, trajectory: Trajectory, known_tools: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """The lines of one trajectory in a per-session format (sharegpt, openai, trl, turns);
    atropos is per group (`atropos_groups`). `known_tools`: ShareGPT's zero-filled tool stats."""
    if format == "sharegpt":
        return [sharegpt_row(trajectory, known_tools)]
    if format == "openai":
        return [openai_row(trajectory)]
    if format == "trl":
        return [trl_row(trajectory)]
    if format == "turns":
        return turn_lines(trajectory)
    raise ValueError(f"{format!r} is not a per-session format; use sharegpt, openai, trl or turns")


__all__ = [
    "FORMATS",
    "IGNORE",
    "STACKS",
    "AtroposExport",
    "ChatTokenizer",
    "CompressionReport",
    "DpoExport",
    "ParsedCall",
    "ParsedMessage",
    "ParsedResponse",
    "ParsedRow",
    "ShareGPTFormatError",
    "SkipSession",
    "Stack",
    "TokenSample",
    "TokenSource",
    "TokenizerError",
    "atropos_groups",
    "chat_messages",
    "compress",
    "dpo_pairs",
    "escape",
    "estimate_tokens",
    "jsonl_line",
    "load_tokenizer",
    "openai_row",
    "parse_gpt_value",
    "parse_sharegpt_row",
    "parse_system_value",
    "parse_tool_value",
    "session_rows",
    "sharegpt_row",
    "stack_row",
    "stack_rows",
    "templated_tokens",
    "token_samples",
    "tokens_and_masks",
    "tools_json",
    "trajectory_tokens",
    "trl_row",
    "turn_lines",
    "unescape",
]

"""Escaping for text placed between the structural tags of the tag formats (ShareGPT/Hermes).

Earlier exporters wrapped raw text in `<think>`, `<tool_call>` and `<tool_response>` tags, so a
`</think>` inside a message ended the reasoning early and the row no longer parsed back. The rule
here changes as little text as possible while staying lossless:

- `<` becomes `&lt;` only where it starts one of the structural tags (`<think>`, `</think>`,
  `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>`, `<tools>`, `</tools>`);
- `&` becomes `&amp;` only where it starts `&lt;` or `&amp;` (so text that already reads like an
  escape survives);
- decoding turns `&lt;` into `<` and `&amp;` into `&`, left to right; nothing else changes.

Every other character, including other tags and special tokens such as `<|im_end|>`, is kept as
is. `unescape(escape(s)) == s` for every string (property-tested); escaped text never contains a
structural tag, so a parser can split on the tags first and unescape the pieces after.
"""

from __future__ import annotations

import re
from typing import Final

TAG_NAMES: Final = ("think", "tool_call", "tool_response", "tools")
_TAG_ALTERNATION = "|".join(TAG_NAMES)
_ESCAPE = re.compile(rf"&(?=lt;|amp;)|<(?=/?(?:{_TAG_ALTERNATION})>)")
_UNESCAPE = re.compile(r"&lt;|&amp;")
_REPLACEMENT: Final = {"&": "&amp;", "<": "&lt;", "&lt;": "<", "&amp;": "&"}


def escape(text: str) -> str:
    """`text` made safe to place between the structural tags, by the module's rule. Most text
    comes back unchanged, and `unescape` restores the original exactly."""
    if "<" not in text and "&" not in text:
        return text
    return _ESCAPE.sub(lambda m: _REPLACEMENT[m.group()], text)


def unescape(text: str) -> str:
    """The inverse of `escape`. Apply it only to text that rolltape escaped (rows marked with
    `text_escaping`): Hermes never escapes its text."""
    if "&" not in text:
        return text
    return _UNESCAPE.sub(lambda m: _REPLACEMENT[m.group()], text)

"""`rolltape log tail`'s one line per event."""

from __future__ import annotations

from rolltape.infra.commands.tail import summarize


def test_a_turn_whose_content_is_sealed_is_marked_not_shown_as_said() -> None:
    assert summarize("turn", {"role": "user", "content": "hi"}) == "user: hi"
    sealed = {"role": "user", "content": "", "sealed": "v1.0123456789abcdef.AAAA"}
    assert summarize("turn", sealed) == "[content sealed] user: "
    assert summarize("turn", sealed, "erased") == "[erased] user: "

"""The console's review rules that need no broker: where a form may send the browser back to."""

from __future__ import annotations

import pytest

from rolltape.infra.console._review import _local


@pytest.mark.parametrize(
    ("asked", "sent_to"),
    [
        ("/sessions/s1", "/sessions/s1"),
        ("/sessions/s1?queue=rejected#review", "/sessions/s1?queue=rejected#review"),
        ("//evil.example/x", "/review"),
        ("/\t/evil.example", "/review"),
        ("/\\evil.example", "/review"),
        ("https://evil.example/", "/review"),
        ("javascript:alert(1)", "/review"),
        ("sessions", "/review"),
        ("", "/review"),
    ],
)
def test_a_form_sends_the_browser_back_only_to_a_path_of_this_console(
    asked: str, sent_to: str
) -> None:
    assert _local(asked) == sent_to

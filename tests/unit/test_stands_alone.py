"""The project stands alone: no tracked file cites a team document that is not in the repository.

A fact the code relies on is stated where it is used, with its public source, or on a page under
docs/ (the contracts are in docs/contracts.md); a citation of a document outside the repository
sends a reader nowhere.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()

#: The documents that live outside the repository. Spelled as a pattern so that this file does not
#: cite them itself.
_OUTSIDE = re.compile(r"\b(?:REFERENCE|DESIGN|STYLE|KAFKA)\.md\b")


def _excluded(path: str) -> bool:
    return path == THIS_FILE


def _tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [name for name in listing.decode().split("\0") if name]


def citations_outside(paths: list[str]) -> list[str]:
    """`file:line: text` for every line of the given files that names an outside document."""
    found = []
    for path in paths:
        file = ROOT / path
        if _excluded(path) or not file.is_file():
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary data cites nothing
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if _OUTSIDE.search(line):
                found.append(f"{path}:{number}: {line.strip()}")
    return found


def test_tracked_files__never_cite_a_document_outside_the_repository() -> None:
    found = citations_outside(_tracked_files())
    assert not found, "state the fact and its public source instead:\n" + "\n".join(found)


def test_the_check__finds_a_citation_and_skips_only_itself() -> None:
    """The check can fail: it reports a line that cites an outside document, and skips only
    this file (which spells the names as a pattern)."""
    assert _OUTSIDE.search("as " + "DESIGN" + ".md says")
    assert not _OUTSIDE.search("docs/design-notes.md and docs/contracts.md")
    assert _excluded(THIS_FILE)
    assert not _excluded("README.md")
    assert not _excluded("docs/contracts.md")

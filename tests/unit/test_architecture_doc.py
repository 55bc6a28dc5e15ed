"""docs/architecture.md names every package: a newcomer who reads it finds each folder's job,
and a package added without a line there fails here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "producers", "processors", "projections", "infra")


def _packages() -> list[str]:
    found = []
    for top in PACKAGES:
        for init in (ROOT / top).rglob("__init__.py"):
            folder = init.parent.relative_to(ROOT)
            if {"tasks", "native", "__pycache__"} & set(folder.parts):
                continue  # task projects of an environment and the Rust core are not packages
            found.append(folder.as_posix())
    return sorted(found)


def test_architecture_names_every_package_by_its_folder_or_its_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        folder
        for folder in _packages()
        if f"{folder}/" not in text and "rolltape." + folder.replace("/", ".") not in text
    ]
    assert missing == []


def test_every_guide_in_docs_is_linked_from_architecture() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    guides = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "architecture.md")
    assert [g for g in guides if f"({g})" not in text] == []

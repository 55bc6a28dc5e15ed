"""Correct fixes of the reference bug-fix environment's test items, as a scripted agent writes
them (by module file name)."""

from __future__ import annotations

FIXES = {
    "nested.py": (
        "def flatten(items: list) -> list:\n"
        "    out = []\n"
        "    for item in items:\n"
        "        if isinstance(item, list):\n"
        "            out.extend(flatten(item))\n"
        "        else:\n"
        "            out.append(item)\n"
        "    return out\n"
    ),
    "intervals.py": (
        "def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:\n"
        "    merged: list[tuple[int, int]] = []\n"
        "    for start, end in sorted(intervals):\n"
        "        if merged and start <= merged[-1][1]:\n"
        "            merged[-1] = (merged[-1][0], max(merged[-1][1], end))\n"
        "        else:\n"
        "            merged.append((start, end))\n"
        "    return merged\n"
    ),
}

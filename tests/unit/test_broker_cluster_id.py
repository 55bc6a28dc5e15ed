"""The managed broker's cluster id is one the storage tool can read as an argument."""

from __future__ import annotations

import re

from rolltape.infra.broker._kraft import _new_cluster_id


def test_cluster_id__is_22_url_safe_characters_and_never_starts_with_a_dash() -> None:
    ids = [_new_cluster_id() for _ in range(2000)]  # 1 in 64 random ids starts with "-"
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)
    assert len(set(ids)) == len(ids)

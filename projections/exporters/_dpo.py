"""Preference pairs for TRL's DPO trainer, conversational form (huggingface/trl,
`docs/source/dataset_formats.md`, preference datasets).

    {"prompt": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
     "chosen": [{"role": "assistant", "content": "..."}],
     "rejected": [{"role": "assistant", "content": "..."}]}

Pairs come from sessions of one group (`group_id`: samples of one prompt, or the decision-policy
conversations of one self-refine run), ranked by a score source (`reward`, `reward:NAME`,
`verdict:JUDGE:KEY`): every two members with different scores make a pair, the higher-scoring
one chosen. The prompt is the longest common prefix of the two conversations (TRL's own rule for
an implicit prompt); chosen and rejected are what follows it in each. Nothing is invented: a
pair whose conversations share no prefix, or where one side has no assistant message after it,
is skipped, and every skip is counted by reason (`no_group`, `no_score`,
`single_member_group`, `tied_scores`, `no_shared_prompt`, `no_completion`).

With the score source `human`, reviewers' preferences come first: two sessions a reviewer
compared make a pair the way the reviewers chose (the majority of their latest choices; a tie
is `tied_preferences`), whatever their scores; the other pairs of a group are ranked by the
reviewers' verdicts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters._openai import chat_messages


@dataclass
class DpoExport:
    """What `dpo_pairs` produced: each row with the group and the two sessions it came from, and
    each skip with its reason, so the manifest can count every skip."""

    pairs: list[tuple[str, Trajectory, Trajectory, dict[str, Any]]] = field(default_factory=list)
    """(group id, chosen, rejected, row) in a stable order."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(session id or pair "chosen|rejected", reason)."""


def _common_prefix(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def dpo_pairs(trajectories: list[Trajectory], score: str = "reward") -> DpoExport:
    """TRL DPO rows, one for every two members of a group with different scores; the higher score
    is chosen. Groups come in id order, and members are ordered by score, then start time, then
    session id, so the same sessions always give the same rows."""
    out = DpoExport()
    decided = _preferred_pairs(trajectories, out) if score == "human" else set()
    groups: dict[str, list[tuple[float, Trajectory]]] = defaultdict(list)
    for t in trajectories:
        if t.group_id is None:
            out.skipped.append((t.session_id, "no_group"))
            continue
        value = t.score(score)
        if value is None or not math.isfinite(value):
            out.skipped.append((t.session_id, "no_score"))
            continue
        groups[t.group_id].append((value, t))
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda m: (-m[0], m[1].started_ns, m[1].session_id))
        if len(members) < 2:
            out.skipped.extend((t.session_id, "single_member_group") for _, t in members)
            continue
        for i, (high, chosen) in enumerate(members):
            for low, rejected in members[i + 1 :]:
                if frozenset((chosen.session_id, rejected.session_id)) in decided:
                    continue  # the reviewers compared these two
                if high == low:
                    out.skipped.append(
                        (f"{chosen.session_id}|{rejected.session_id}", "tied_scores")
                    )
                    continue
                _pair(out, key, chosen, rejected)
    return out


def _pair(out: DpoExport, key: str, chosen: Trajectory, rejected: Trajectory) -> None:
    """The row of `chosen` over `rejected`, or the reason there is none."""
    pair = f"{chosen.session_id}|{rejected.session_id}"
    a, b = chat_messages(chosen, "trl"), chat_messages(rejected, "trl")
    shared = _common_prefix(a, b)
    if not shared:
        out.skipped.append((pair, "no_shared_prompt"))
        return
    if not any(m["role"] == "assistant" for m in a[shared:]) or not any(
        m["role"] == "assistant" for m in b[shared:]
    ):
        out.skipped.append((pair, "no_completion"))
        return
    row = {"prompt": a[:shared], "chosen": a[shared:], "rejected": b[shared:]}
    out.pairs.append((key, chosen, rejected, row))


def _preferred_pairs(trajectories: list[Trajectory], out: DpoExport) -> set[frozenset[str]]:
    """The pairs reviewers compared, added to `out` as they chose: each reviewer's latest
    choice between two sessions counts once. The pairs decided (or tied) are returned, so the
    ranking by score leaves them alone."""
    by_id = {t.session_id: t for t in trajectories}
    latest: dict[tuple[str, frozenset[str]], tuple[int, str, str]] = {}
    for t in trajectories:
        for p in t.preferences:
            if p.rejected in by_id:
                key = (p.reviewer, frozenset((t.session_id, p.rejected)))
                choice = (p.ts_ns, p.event_hash, t.session_id)  # the latest; the hash breaks ties
                latest[key] = max(latest.get(key, choice), choice)
    votes: dict[frozenset[str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (_, pair), (_, _, chosen_id) in latest.items():
        votes[pair][chosen_id] += 1
    for pair in sorted(votes, key=sorted):
        a, b = sorted(pair)
        for_a, for_b = votes[pair][a], votes[pair][b]
        if for_a == for_b:
            out.skipped.append((f"{a}|{b}", "tied_preferences"))
            continue
        winner, loser = (by_id[a], by_id[b]) if for_a > for_b else (by_id[b], by_id[a])
        _pair(out, winner.group_id or "", winner, loser)
    return set(votes)

"""Replay's pure core: order independence, reproduction of the live outputs, version plans."""

from __future__ import annotations

import random
from typing import Any

from rolltape.processors import (
    Emitted,
    ProcessorConfig,
    Replayer,
    ReplayRecord,
    ReplayResult,
    plan_writes,
    replay,
    replay_order,
)
from rolltape.processors.audit import InputRecord
from rolltape.processors.rules import RuleBook, RuleSet
from rolltape.projections import fold
from rolltape.schemas import decode, read_event
from tests.unit.processors.scripted import Tape, run
from tests.unit.projections.sessions import CONFIG, record_sessions


def _training(tape: Tape, sid: str, noise: float) -> list[InputRecord]:
    records = [tape.start(sid, kind="training", run_config={"lr": 0.1, "batch_size": 32})]
    for epoch in range(8):
        records.append(
            tape.metric(
                sid,
                epoch,
                steps=10,
                train_loss=1.0 / (epoch + 1),
                val_loss=1.0 / (epoch + 1),
                grad_noise_scale=noise,
                max_layer_grad_norm=1.0,
                min_layer_grad_norm=0.1,
            )
        )
    records.extend(tape.end(sid, streams=("metrics",), val_acc=0.9))
    return records


def _recorded() -> list[InputRecord]:
    tape = Tape()
    return record_sessions(tape) + _training(tape, "t-1", 40.0) + _training(tape, "t-2", 500.0)


def _as_read(records: list[InputRecord], seed: int | None = None) -> list[ReplayRecord]:
    """Records as a scan returns them: broker times in append order, topics interleaved anyhow."""
    timed = [ReplayRecord(r, broker_ts_ms=i) for i, r in enumerate(records)]
    if seed is not None:
        random.Random(seed).shuffle(timed)
    return timed


def _bytes(chains: dict[tuple[str, str], list[Emitted]]) -> dict[tuple[str, str], list[bytes]]:
    return {key: [o.value for o in outputs] for key, outputs in chains.items()}


def test_replay_reproduces_the_live_outputs_byte_for_byte() -> None:
    records = _recorded()
    live, _ = run(records, CONFIG)
    live_chains: dict[tuple[str, str], list[bytes]] = {}
    for o in live:
        if isinstance(o, Emitted):
            live_chains.setdefault((o.stream, o.session_id), []).append(o.value)
    replayed = replay(replay_order(_as_read(records)), CONFIG)
    assert _bytes(replayed.chains) == live_chains
    assert replayed.sessions == {"s-good", "s-bad", "s-tok-a", "s-tok-b", "t-1", "t-2"}


def test_sessions_yield_each_session_once_with_the_events_the_step_decoded_foldable_as_read() -> (
    None
):
    records = replay_order(_as_read(_recorded()))
    whole = replay(records, CONFIG)
    result = ReplayResult()
    replayer = Replayer(CONFIG)
    seen: list[str] = []
    outputs: dict[tuple[str, str], list[Emitted]] = {}
    for session in replayer.sessions(records, result):
        seen.append(session.session_id)
        mine = [r for r in records if (r.key or b"").decode() == session.session_id]
        assert [e.seq for e in session.events] == [read_event(r.value).seq for r in mine]
        # Decoded once: the step validated every payload already (the fold reads those bodies).
        assert all(e.parsed for e in session.events)
        for output in session.outputs:
            outputs.setdefault((output.stream, output.session_id), []).append(output)
        if session.session_id.startswith("s-"):
            events = [e for e in session.events if e.stream == "events"]
            derived = [read_event(o.value) for o in session.outputs]
            from_step = fold(events, derived)
            from_bytes = fold([read_event(r.value) for r in mine if r.stream == "events"], derived)
            assert from_step == from_bytes
    assert sorted(seen) == sorted(set(seen)) == sorted(whole.sessions)
    assert _bytes(replayer.finish(result, outputs).chains) == _bytes(whole.chains)


def test_replay_output_does_not_depend_on_how_the_scan_interleaved_the_topics() -> None:
    records = _recorded()
    first = replay(replay_order(_as_read(records)), CONFIG)
    for seed in range(5):
        again = replay(replay_order(_as_read(records, seed)), CONFIG)
        assert _bytes(again.chains) == _bytes(first.chains)


def test_a_new_version_writes_its_own_chains_and_a_changed_threshold_changes_only_its_firings() -> (
    None
):
    records = replay_order(_as_read(_recorded()))
    live = replay(records, CONFIG)
    strict = RuleSet(name="low-noise-ok", r2_noise_scale_low=30.0)
    v2 = replay(
        records,
        ProcessorConfig(rewards=CONFIG.rewards, rules=RuleBook.only(strict), judge_version="v2"),
    )
    assert {stream for stream, _ in v2.chains} == {"rules@v2", "verdicts@v2", "filtered@v2"}

    def fired(result: Any, stream: str, sid: str) -> list[tuple[str, ...]]:
        return [tuple(decode(o.value)["payload"]["fired"]) for o in result.chains[(stream, sid)]]

    assert "R2" in {r for f in fired(live, "rules", "t-1") for r in f}
    assert all("R2" not in f for f in fired(v2, "rules@v2", "t-1"))
    # t-2's noise scale is inside both bands: the same firings, under the new rule set's label.
    assert fired(v2, "rules@v2", "t-2") == fired(live, "rules", "t-2")
    # Agent sessions do not read rules: their filter outcomes are the same payloads.
    for sid in ("s-good", "s-bad"):
        old = decode(live.chains[("filtered", sid)][0].value)["payload"]
        new = decode(v2.chains[("filtered@v2", sid)][0].value)["payload"]
        assert old == new
    live_verdict = decode(live.chains[("verdicts", "t-1")][0].value)["payload"]
    v2_verdict = decode(v2.chains[("verdicts@v2", "t-1")][0].value)["payload"]
    assert live_verdict["counts"] != v2_verdict["counts"]


def test_plans_append_new_outputs_count_reproduced_ones_and_refuse_to_rewrite() -> None:
    result = replay(replay_order(_as_read(_recorded())), CONFIG)
    everything = _bytes(result.chains)
    total = sum(len(v) for v in everything.values())
    assert len(plan_writes(result, {}).writes) == total
    same = plan_writes(result, everything)
    assert (same.writes, same.reproduced, same.conflicts) == ([], total, [])
    partial = {k: v[:-1] for k, v in everything.items()}
    resumed = plan_writes(result, partial)
    assert len(resumed.writes) == len(everything) and resumed.reproduced == total - len(everything)
    forged = dict(everything)
    forged[("filtered", "s-good")] = [b"something else"]
    clash = plan_writes(result, forged)
    assert [(c.session_id, c.stream, c.seq) for c in clash.conflicts] == [("s-good", "filtered", 0)]
    assert all(o.session_id != "s-good" for o in clash.writes)
    longer = dict(everything)
    longer[("verdicts", "t-1")] = [*everything[("verdicts", "t-1")], b"more"]
    assert [c.session_id for c in plan_writes(result, longer).conflicts] == ["t-1"]


def test_since_takes_whole_sessions_that_started_after_the_time() -> None:
    from rolltape.infra.commands.replay import sessions_since

    records = _as_read(_recorded())
    first_of = {}
    for item in records:
        first_of.setdefault(item.record.key, item.broker_ts_ms)
    cut = first_of[b"s-tok-a"]
    kept = sessions_since(records, cut)
    assert {item.record.key for item in kept} == {k for k, t in first_of.items() if t >= cut}
    assert all(
        sum(1 for r in kept if r.record.key == key)
        == sum(1 for r in records if r.record.key == key)
        for key in {item.record.key for item in kept}
    )

"""The feed's bookkeeping without a broker: which records open a session buffer (and so hold
their partition's commits back) and when a session is handed out."""

from aiokafka import TopicPartition

from rolltape.processors import Emitted, ProcessorConfig
from rolltape.projections import TrajectoryFeed
from rolltape.schemas import decode
from tests.unit.processors.scripted import Tape, run
from tests.unit.projections.sessions import CONFIG, record_sessions


def _feed() -> TrajectoryFeed:
    return TrajectoryFeed("127.0.0.1:9", group_id="g")  # never started: nothing connects


def test_only_the_chosen_versions_chains_open_session_buffers_and_decided_sessions_are_ready() -> (
    None
):
    tape = Tape()
    records = record_sessions(tape)
    outputs, _ = run(records, CONFIG)
    feed = _feed()
    events, derived = TopicPartition("e", 0), TopicPartition("d", 0)
    v9, _ = run(records, ProcessorConfig(rewards=CONFIG.rewards, judge_version="v9"))
    for offset, output in enumerate(o for o in v9 if isinstance(o, Emitted)):
        feed._add(derived, offset, output.session_id.encode(), output.value)
    assert feed._open == {}  # another version's chains never hold this feed's commits back
    tampered = outputs[0].value.replace(b'"stream":"', b'"stream":"x', 1)  # type: ignore[union-attr]
    feed._add(derived, 50, b"s-good", tampered)
    assert feed._open == {} and feed.skipped["tampered_record"] == 1
    for offset, record in enumerate(
        r for r in records if decode(r.value)["session_id"] == "s-good"
    ):
        feed._add(events, offset, record.key, record.value)
    assert feed._ready.empty() and feed._open["s-good"].offsets == {events: 0}
    for offset, output in enumerate(
        o for o in outputs if isinstance(o, Emitted) and o.session_id == "s-good"
    ):
        feed._add(derived, 100 + offset, output.session_id.encode(), output.value)
    assert feed._ready.qsize() == 1
    sid, trajectory = feed._ready.get_nowait()
    assert sid == "s-good" and trajectory.accepted is True
    feed._add(derived, 500, b"s-good", outputs[0].value)  # a late copy: ignored, no new buffer
    assert feed._ready.empty()


def test_an_undecided_session_is_abandoned_only_when_asked_and_decided_ones_never() -> None:
    tape = Tape()
    records = record_sessions(tape)
    outputs, _ = run(records, CONFIG)
    events = TopicPartition("e", 0)
    patient, impatient = _feed(), TrajectoryFeed("127.0.0.1:9", group_id="g", abandon_after_s=5)
    for feed in (patient, impatient):
        for offset, record in enumerate(records):
            if decode(record.value)["session_id"] in ("s-good", "s-bad"):
                feed._add(events, offset, record.key, record.value)
        for output in outputs:  # s-good is decided, s-bad never gets its filter outcome here
            if isinstance(output, Emitted) and output.session_id == "s-good":
                feed._add(TopicPartition("d", 0), 0, b"s-good", output.value)
        far_future = feed._open["s-bad"].last_seen + 60
        feed._abandon_idle(far_future)
    assert set(patient._open) == {"s-good", "s-bad"}
    assert set(impatient._open) == {"s-good"} and impatient.skipped["abandoned"] == 1
    impatient._add(events, 999, b"s-bad", records[-1].value)  # later records are ignored
    assert "s-bad" not in impatient._open


def test_atropos_sink__an_ungrouped_session_settles_at_once_when_groups_need_more() -> None:
    """A group of one can never reach group_size > 1: waiting for it would hold its partition's
    commits back for good. It is settled as skipped (no POST is made: nothing listens here)."""
    import asyncio

    from rolltape.projections import AtroposSink
    from tests.unit.projections.sessions import trajectories

    grouped = next(t for t in trajectories().values() if t.group_id is not None)
    ungrouped = grouped.model_copy(
        update={"group_id": None, "session_id": "alone", "trajectory_id": "alone"}
    )

    async def scenario() -> tuple[list[str], list[str], AtroposSink]:
        sink = AtroposSink("http://127.0.0.1:9", group_size=4)
        try:
            settled = [t.session_id for t in await sink.add(ungrouped)]
            waiting = [t.session_id for t in await sink.add(grouped)]
            return settled, waiting, sink
        finally:
            await sink._client.aclose()

    settled, waiting, sink = asyncio.run(scenario())
    assert settled == [ungrouped.session_id] and waiting == []
    assert sink.skipped == {"no_group": 1} and sink.waiting == {grouped.group_id: 1}

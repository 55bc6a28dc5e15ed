"""The export pipeline without Kafka: records -> hash check -> fold -> files + manifest."""

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from rolltape.infra.commands.export import Collected, ExportError, run_export
from rolltape.processors import Emitted
from rolltape.projections import ExportOptions, Selection
from rolltape.schemas import LIVE_JUDGE_VERSION, read_event
from tests.unit.processors.scripted import Tape, run
from tests.unit.projections.sessions import CONFIG, record_sessions

_OPEN: list[Collected] = []


@pytest.fixture(autouse=True)
def _close_spills() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def _collected(
    tamper: str | None = None, *, pairs: bool = False, judge_version: str = LIVE_JUDGE_VERSION
) -> Collected:
    tape = Tape()
    records = record_sessions(tape)
    if pairs:  # two answers to one prompt with different rewards: a preference pair
        for sid, answer, reward in (("s-pair-a", "42", 1.0), ("s-pair-b", "41", 0.0)):
            records.append(tape.start(sid, task="6*7", group_id="g3"))
            records.append(tape.event(sid, "turn", role="user", content="What is 6*7?"))
            records.append(tape.event(sid, "turn", role="assistant", content=answer, reasoning="."))
            records.append(tape.event(sid, "reward", value=reward))
            records.extend(tape.end(sid))
    outputs, _ = run(records, CONFIG)
    collected = Collected(judge_version)
    _OPEN.append(collected)
    for record in records:
        value = record.value
        if tamper is not None and tamper.encode() in value and b'"seq":1,' in value:
            value = value.replace(b"What is", b"Who is")
        collected.add(value, record.key)
    for output in outputs:
        if isinstance(output, Emitted):
            collected.add(output.value, output.session_id.encode())
    collected.add(b"not json")
    return collected


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_export_twice_gives_byte_identical_files(tmp_path: Path) -> None:
    options = ExportOptions(format="sharegpt", shard_lines=3)
    first = run_export(_collected(), options, tmp_path / "a")
    run_export(_collected(), options, tmp_path / "b")
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert [f.name for f in first.files] == ["sharegpt-00000.jsonl", "sharegpt-00001.jsonl"]
    assert (first.sessions_read, first.sessions_exported, first.lines) == (4, 4, 4)
    assert first.source["unreadable_records"] == 1


def test_sidecar_lines_name_the_sessions_and_chain_spans_of_each_data_line(tmp_path: Path) -> None:
    run_export(_collected(), ExportOptions(format="openai"), tmp_path)
    data = (tmp_path / "openai-00000.jsonl").read_bytes().splitlines()
    side = [
        orjson.loads(line)
        for line in (tmp_path / ".rolltape" / "openai-00000.provenance.jsonl")
        .read_bytes()
        .splitlines()
    ]
    assert len(data) == len(side) == 4
    assert [s["line"] for s in side] == [0, 1, 2, 3]
    good = next(s for s in side if s["sessions"][0]["session_id"] == "s-good")
    assert set(good["sessions"][0]["chains"]) == {"events", "verdicts", "filtered"}
    manifest = orjson.loads((tmp_path / ".rolltape" / "manifest.json").read_bytes())
    assert manifest["files"][0]["lines"] == 4 and manifest["format"] == "openai"
    assert manifest["files"][0]["provenance_name"] == ".rolltape/openai-00000.provenance.jsonl"


def test_accepted_only_and_rejected_only_follow_the_filter_outcome(tmp_path: Path) -> None:
    accepted = run_export(
        _collected(),
        ExportOptions(format="sharegpt", selection=Selection(accepted="accepted")),
        tmp_path / "a",
    )
    rejected = run_export(
        _collected(),
        ExportOptions(format="sharegpt", selection=Selection(accepted="rejected")),
        tmp_path / "r",
    )
    assert (accepted.sessions_exported, accepted.skipped) == (3, {"not_accepted": 1})
    assert (rejected.sessions_exported, rejected.skipped) == (1, {"not_rejected": 3})
    row = orjson.loads((tmp_path / "r" / "sharegpt-00000.jsonl").read_bytes())
    assert row["session_id"] == "s-bad"


def test_a_tampered_event_keeps_its_session_out_of_the_export(tmp_path: Path) -> None:
    manifest = run_export(_collected(tamper="s-bad"), ExportOptions(format="sharegpt"), tmp_path)
    assert manifest.source["tampered_records"] == 1
    assert manifest.skipped == {"chain_broken": 1}
    included = run_export(
        _collected(tamper="s-bad"),
        ExportOptions(format="sharegpt", selection=Selection(include_broken=True)),
        tmp_path / "all",
    )
    assert included.sessions_exported == 4


def test_an_unknown_judge_version_exports_unfiltered_sessions_only_when_asked(
    tmp_path: Path,
) -> None:
    options = ExportOptions(
        format="sharegpt", selection=Selection(judge_version="v9", accepted="accepted")
    )
    manifest = run_export(_collected(judge_version="v9"), options, tmp_path)
    assert manifest.sessions_exported == 0 and manifest.skipped == {"not_filtered": 4}
    with pytest.raises(ExportError, match="collected for judge version 'live'"):
        run_export(_collected(), options, tmp_path / "other")


def test_atropos_export_records_skips_and_groups(tmp_path: Path) -> None:
    manifest = run_export(_collected(), ExportOptions(format="atropos"), tmp_path)
    assert manifest.lines == 1 and manifest.skipped == {"needs_tokenizer": 2}
    side = orjson.loads((tmp_path / ".rolltape" / "atropos-00000.provenance.jsonl").read_bytes())
    assert side["group"] == "g2" and [s["session_id"] for s in side["sessions"]] == [
        "s-tok-a",
        "s-tok-b",
    ]


def test_an_existing_export_is_replaced_only_with_overwrite(tmp_path: Path) -> None:
    run_export(_collected(), ExportOptions(format="turns", shard_lines=1), tmp_path)
    with pytest.raises(ExportError, match="--overwrite"):
        run_export(_collected(), ExportOptions(format="turns"), tmp_path)
    run_export(_collected(), ExportOptions(format="turns"), tmp_path, overwrite=True)
    assert sorted(_files(tmp_path)) == [
        ".rolltape/manifest.json",
        ".rolltape/turns-00000.provenance.jsonl",
        "turns-00000.jsonl",
    ]
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        run_export(_collected(), ExportOptions(format="turns"), other)


def test_sessions_tasks_and_time_windows_select_and_count_only_the_picked_sessions(
    tmp_path: Path,
) -> None:
    """A narrowed export reads (by the read model) only the sessions it picks, so it counts
    only those: the others are neither read nor skipped, the same when a scan filed them."""
    from tests.unit.projections.sessions import trajectories

    starts = {sid: t.started_ns for sid, t in trajectories().items()}
    by_pattern = run_export(
        _collected(),
        ExportOptions(format="openai", selection=Selection(sessions=("s-tok-*",))),
        tmp_path / "p",
    )
    assert by_pattern.sessions_exported == by_pattern.sessions_read == 2
    assert by_pattern.skipped == {}
    window = Selection(since_ns=starts["s-bad"], until_ns=starts["s-tok-b"])
    by_time = run_export(
        _collected(), ExportOptions(format="openai", selection=window), tmp_path / "t"
    )
    assert by_time.sessions_exported == 2  # s-bad and s-tok-a
    assert by_time.sessions_read == 2 and by_time.skipped == {}
    whole = _collected().source()["records_read"]
    assert 0 < by_time.source["records_read"] < whole  # the picked sessions' records only
    task = next(iter(trajectories().values())).task
    by_task = run_export(
        _collected(),
        ExportOptions(format="openai", selection=Selection(tasks=(task,))),
        tmp_path / "k",
    )
    assert by_task.sessions_read == sum(t.task == task for t in trajectories().values())


@pytest.mark.parametrize("format", ["sharegpt", "openai", "trl", "turns", "atropos", "dpo"])
def test_every_export_folder_loads_as_is_with_datasets(tmp_path: Path, format: str) -> None:
    """`datasets.load_dataset("json", data_dir=OUT)` reads every .json/.jsonl file of the folder
    as data: the sidecars and the manifest must not be among them."""
    import datasets

    datasets.disable_progress_bars()
    options = ExportOptions(format=format, score="reward", keep_equal_scores=True)  # type: ignore[arg-type]
    manifest = run_export(_collected(pairs=True), options, tmp_path / "out")
    assert manifest.lines > 0, manifest.skipped
    loaded = datasets.load_dataset(
        "json", data_dir=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache")
    )
    assert loaded["train"].num_rows == manifest.lines


def test_dpo_export_pairs_group_members_by_score_and_counts_what_it_skips(tmp_path: Path) -> None:
    manifest = run_export(_collected(pairs=True), ExportOptions(format="dpo"), tmp_path)
    # g1: the two sessions start differently (no shared prompt); g2: both answered the same
    # (nothing to prefer after the prompt); g3: a pair
    assert manifest.lines == 1 and manifest.sessions_exported == 2
    assert manifest.skipped == {"no_completion": 1, "no_shared_prompt": 1}
    row = orjson.loads((tmp_path / "dpo-00000.jsonl").read_bytes())
    assert row == {
        "prompt": [{"role": "user", "content": "What is 6*7?"}],
        "chosen": [{"role": "assistant", "content": "42", "reasoning_content": "."}],
        "rejected": [{"role": "assistant", "content": "41", "reasoning_content": "."}],
    }
    side = orjson.loads((tmp_path / ".rolltape" / "dpo-00000.provenance.jsonl").read_bytes())
    assert side["group"] == "g3" and side["scores"] == [1.0, 0.0]
    assert [s["session_id"] for s in side["sessions"]] == ["s-pair-a", "s-pair-b"]


@pytest.mark.parametrize(
    ("format", "extra"),
    [
        ("sharegpt", {"shard_lines": 2}),
        ("openai", {}),
        ("trl", {"token_budget": 40}),
        ("turns", {"shard_lines": 3}),
        ("atropos", {"keep_equal_scores": True}),
        ("dpo", {}),
    ],
)
def test_the_streaming_export_writes_the_bytes_of_the_export_built_in_memory(
    tmp_path: Path, format: str, extra: dict[str, object]
) -> None:
    """`rolltape dataset export` sorts through its spill and writes lines as they come; `build_export`
    (what verify-export re-renders) sorts a list in memory. Both must give the same files."""
    from rolltape.projections import build_export, fold

    options = ExportOptions.model_validate({"format": format, **extra})
    collected = _collected(pairs=True)
    streamed = run_export(collected, options, tmp_path)
    trajectories = [fold(s.events, s.derived) for s in collected.sessions() if s.events]
    blobs, manifest = build_export(trajectories, options, source=collected.source())
    assert streamed == manifest
    on_disk = _files(tmp_path)
    assert on_disk.pop(".rolltape/manifest.json") == manifest.to_bytes()
    assert on_disk == dict(blobs)


def test_the_spill_orders_sessions_and_export_keys_as_python_sorts_them() -> None:
    """SQLite compares text as UTF-8 bytes; Python compares code points: the two orders agree,
    which the export's determinism rests on (ids beyond ASCII and the BMP included)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from rolltape.infra.kafka.spill import Spill
    from rolltape.projections import Chosen
    from tests.unit.processors.scripted import Tape
    from tests.unit.projections.sessions import trajectories

    some = next(iter(trajectories().values()))
    record = Tape().event("s-any", "reward", value=1.0).value  # any record: the id orders
    event = read_event(record)
    ids = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), ids, ids), unique=True))
    def check(keys: list[tuple[int, str, str]]) -> None:
        spill = Spill()
        try:
            for _, sid, _ in keys:
                spill.add(event._replace(session_id=sid), record)
            assert [s.session_id for s in spill.sessions()] == sorted({k[1] for k in keys})
            store = spill.store()
            for key in keys:
                store.add(key, Chosen(some.model_copy(update={"session_id": repr(key)}), None))
            ordered = [c.trajectory.session_id for c in store.ordered()]
            assert ordered == [repr(key) for key in sorted(keys)]
        finally:
            spill.close()

    check()

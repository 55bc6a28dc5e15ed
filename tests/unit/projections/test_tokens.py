"""The token form: ids, the sampled mask and logprobs aligned, branches where the context was
rewritten, and each stack's field names."""

from pathlib import Path
from typing import Any

import orjson
import pytest

from rolltape.projections import ExportOptions, build_export
from rolltape.projections.exporters import (
    SkipSession,
    load_tokenizer,
    stack_row,
    token_samples,
)
from tests.unit.processors.scripted import Tape
from tests.unit.projections.sessions import HOSTILE, captured, fold_records

row_of = stack_row


def test_exact_ids_keep_the_engines_tokens_and_mask_the_tool_tokens() -> None:
    trajectory = fold_records(captured(Tape()))
    [sample] = token_samples(trajectory)
    assert sample.token_source == "exact" and sample.tokenizer is None
    assert sample.token_ids == [1, 2, 3, 10, 11, 20, 21, 12, 13]
    assert sample.mask == [0, 0, 0, 1, 1, 0, 0, 1, 1]  # the tool result's tokens 20, 21 are 0
    assert sample.logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3, -0.4]
    assert sample.spans == [(3, 5), (7, 9)]
    assert len(sample.token_ids) == len(sample.mask) == len(sample.logprobs)
    assert sample.turn_rewards == [0.5, 0.0]
    assert (sample.reward, sample.stop_reason) == (1.0, "stop")
    assert (sample.model, sample.model_version, sample.group_id) == ("policy", "gen-0", "g")
    assert sample.sample_id == f"{trajectory.trajectory_id}:0" and sample.branches == 1
    assert sample.has_logprobs and sample.prompt_length == 3


def test_a_rewritten_context_starts_a_branch_and_no_token_is_trained_twice() -> None:
    trajectory = fold_records(captured(Tape(), compressed=True))
    first, second = token_samples(trajectory)
    assert (first.branch, second.branch, first.branches) == (0, 1, 2)
    assert first.token_ids == [1, 2, 3, 10, 11, 20, 21, 12, 13]
    assert second.token_ids == [1, 2, 3, 77, 30, 14]
    assert second.mask == [0, 0, 0, 0, 0, 1] and second.logprobs[-1] == -0.5
    assert (second.stop_reason, second.turn_rewards) == ("length", [0.0])
    assert first.sample_id != second.sample_id
    sampled = [t for s in (first, second) for t, m in zip(s.token_ids, s.mask, strict=True) if m]
    assert sampled == [10, 11, 12, 13, 14]


def test_without_ids_or_a_tokenizer_a_session_is_skipped_not_guessed() -> None:
    tape = Tape()
    records = [tape.start("s", task="t")]
    records.append(tape.event("s", "turn", role="user", content="hi"))
    records.append(tape.event("s", "turn", role="assistant", content="hello"))
    records.extend(tape.end("s"))
    with pytest.raises(SkipSession) as raised:
        token_samples(fold_records(records))
    assert raised.value.reason == "needs_tokenizer"


def _summarized(tape: Tape) -> list[Any]:
    sid = "s-sum"
    records = [tape.start(sid, task="count")]
    records.append(tape.event(sid, "turn", role="system", content="You are careful."))
    records.append(tape.event(sid, "turn", role="user", content="What is 6*7? " + HOSTILE))
    records.append(tape.event(sid, "turn", role="assistant", content="Let me check."))
    records.append(tape.event(sid, "turn", role="user", content="go on"))
    records.append(tape.event(sid, "turn", role="assistant", content="It is 42."))
    records.append(
        tape.event(sid, "turn", role="user", content="[CONTEXT SUMMARY]: found 42", summary=True)
    )
    records.append(tape.event(sid, "turn", role="assistant", content="I could not count 1 2 3"))
    records.append(tape.event(sid, "reward", value=0.25))
    records.extend(tape.end(sid))
    return records


def test_a_template_splits_a_compressed_session_at_its_summary(tmp_path: Path) -> None:
    from tests.support.tokenizer import build_chat_tokenizer

    tokenizer = load_tokenizer(build_chat_tokenizer(tmp_path / "tok"))
    trajectory = fold_records(_summarized(Tape()))
    first, second = token_samples(trajectory, tokenizer, tokenizer_label="tok@abc")
    assert {first.token_source, second.token_source} == {"template"}
    assert first.tokenizer == "tok@abc"

    def trained(sample: Any) -> list[str]:
        return [tokenizer.decode(sample.token_ids[a:b]) for a, b in sample.spans]

    assert trained(first) == ["Let me check.<|im_end|>\n", "It is 42.<|im_end|>\n"]
    assert trained(second) == ["I could not count 1 2 3<|im_end|>\n"]
    text = tokenizer.decode(second.token_ids)
    # The second branch: the system prompt and task, the summary, what came after it.
    assert text.startswith("<|im_start|>system\nYou are careful.")
    assert HOSTILE in text and "[CONTEXT SUMMARY]: found 42" in text
    assert "Let me check." not in text
    for sample in (first, second):
        assert sum(sample.mask) == sum(b - a for a, b in sample.spans)
        assert sample.logprobs is None and sample.turn_rewards is None


def test_the_export_is_byte_identical_and_its_manifest_says_where_ids_came_from() -> None:
    trajectories = [fold_records(captured(Tape(), compressed=True))]
    options = ExportOptions(format="tokens")
    files, manifest = build_export(trajectories, options)
    again, _ = build_export(trajectories, options)
    assert files == again
    assert manifest.token_sources == {"exact": 2} and manifest.lines == 2
    data = dict(files)["tokens-00000.jsonl"]
    rows = [orjson.loads(line) for line in data.splitlines()]
    assert [row["branch"] for row in rows] == [0, 1]
    sidecar = dict(files)[".rolltape/tokens-00000.provenance.jsonl"]
    assert [orjson.loads(line)["branch"] for line in sidecar.splitlines()] == [0, 1]


def test_stack_rows_use_each_stacks_field_names() -> None:
    trajectory = fold_records(captured(Tape()))
    [sample] = token_samples(trajectory)

    def stack_row(stack: str, sample: Any) -> dict[str, Any]:
        return row_of(stack, sample, trajectory)

    verl = stack_row("verl", sample)
    assert verl["prompt_ids"] == [1, 2, 3]
    assert verl["response_ids"] == [10, 11, 20, 21, 12, 13]
    assert verl["response_mask"] == [1, 1, 0, 0, 1, 1]
    assert verl["response_logprobs"] == [-0.1, -0.2, 0.0, 0.0, -0.3, -0.4]
    assert verl["reward_score"] == 1.0
    skyrl = stack_row("skyrl", sample)
    assert skyrl["loss_masks"] == verl["response_mask"]
    assert skyrl["rewards"] == [0.0, 0.5, 0.0, 0.0, 0.0, 1.0]  # the turn's, then the final
    slime = stack_row("slime", sample)
    assert slime["tokens"] == sample.token_ids and slime["response_length"] == 6
    assert slime["loss_mask"] == verl["response_mask"] and slime["weight_versions"] == ["gen-0"]
    assert slime["status"] == "completed"
    rllm = stack_row("rllm", sample)
    assert [s["prompt_ids"] for s in rllm["steps"]] == [[1, 2, 3], [1, 2, 3, 10, 11, 20, 21]]
    assert [s["reward"] for s in rllm["steps"]] == [0.5, 0.0]
    assert rllm["metadata"]["model_version"] == "gen-0"


def test_verifiers_own_trace_type_reads_the_rows_back_as_the_sample() -> None:
    """verifiers installs from PyPI on CPU: its v1 trace validates the row, and the trace's
    branch gives back the sample's ids, sampled mask and logprobs."""
    trace_types = pytest.importorskip("verifiers.v1.trace")
    for compressed in (False, True):
        trajectory = fold_records(captured(Tape(), compressed=compressed))
        for sample in token_samples(trajectory):
            trace = trace_types.WireTrace.model_validate(row_of("verifiers", sample, trajectory))
            [branch] = trace.branches
            assert branch.token_ids == sample.token_ids
            assert branch.sampled_mask == [m == 1 for m in sample.mask]
            assert branch.logprobs == sample.logprobs
            assert trace.reward == sample.reward
            roles = [node.message.role for node in trace.nodes]
            assert roles[1::2] == ["assistant"] * len(sample.spans)
        assert trace.nodes[-1].message.content in ("It is 5.", "9.")


def test_stacks_that_train_on_a_reward_skip_a_session_without_one() -> None:
    tape = Tape()
    records = [r for r in captured(tape) if b'"reward"' not in r.value]
    [sample] = token_samples(fold_records(records))
    assert sample.reward is None
    assert stack_row("rolltape", sample, fold_records(records))["reward"] is None
    with pytest.raises(SkipSession) as raised:
        stack_row("verl", sample, fold_records(records))
    assert raised.value.reason == "no_score"


def test_the_export_loads_with_hugging_face_datasets_aligned(tmp_path: Path) -> None:
    """pyarrow's JSON reader (under `datasets.load_dataset("json")`) misplaces nulls inside
    lists of numbers: the lines hold none, and load back as written."""
    datasets = pytest.importorskip("datasets")
    trajectories = [fold_records(captured(Tape(), f"s-{i}", compressed=i == 1)) for i in range(3)]
    files, _ = build_export(trajectories, ExportOptions(format="tokens"))
    for name, data in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    loaded = datasets.load_dataset("json", data_dir=str(tmp_path), split="train").to_list()
    written = [orjson.loads(line) for line in dict(files)["tokens-00000.jsonl"].splitlines()]
    assert len(loaded) == len(written) == 4
    for row, line in zip(loaded, written, strict=True):
        assert (row["logprobs"], row["turn_rewards"]) == (line["logprobs"], line["turn_rewards"])
        assert len(row["logprobs"]) == len(row["token_ids"]) == len(row["mask"])

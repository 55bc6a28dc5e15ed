"""Prompt versions as records: content-addressed (the same text is the same version), with their
lineage; labels in the order the log first holds them; the champion is what the latest
promotion says, never a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from rolltape.producers import Recorder
from rolltape.projections import PromptLookupError, PromptTarget, fold_prompts
from rolltape.projections._prompts import Recorded
from rolltape.schemas import PromptPromotion, PromptVersion, prompt_digest, read_event
from tests.unit.producers.recorded import spooled_records

TARGET = "harness.policy"


def test_a_version__is_addressed_by_its_target_and_content() -> None:
    one = PromptVersion.of(TARGET, "Act on every fired rule.")
    assert one.digest == prompt_digest(TARGET, "Act on every fired rule.")
    assert (
        PromptVersion.of(TARGET, "Act on every fired rule.", technique="few_shot").digest
        == one.digest
    )
    assert PromptVersion.of("env.bugfix", "Act on every fired rule.").digest != one.digest
    with pytest.raises(ValidationError, match="not the digest"):
        PromptVersion.model_validate({**one.model_dump(), "content": "changed"})
    with pytest.raises(ValidationError, match="its own parent"):
        PromptVersion.of(TARGET, "x", parents=(prompt_digest(TARGET, "x"),))
    with pytest.raises(ValidationError, match="target"):
        PromptVersion.of("Not A Target", "x")


def _record(
    tmp_path: Path, steps: list[PromptVersion | PromptPromotion]
) -> list[tuple[str, object]]:
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent")
    for n, step in enumerate(steps):
        with recorder.session("prompts", session_id=f"prompts.{n}", trainable=False) as session:
            if isinstance(step, PromptVersion):
                session.prompt_version(step.model_dump())
            else:
                session.prompt_promotion(step.model_dump())
    recorder.close(10)
    events = [read_event(v) for v in spooled_records(tmp_path / "spool")]
    return [(e.session_id, e) for e in events]


def test_the_champion_and_lineage__are_projections_of_the_log(tmp_path: Path) -> None:
    v0 = PromptVersion.of(TARGET, "Act on fired rules.", technique="manual")
    v1 = PromptVersion.of(
        TARGET,
        "Think, then act on fired rules.",
        parents=(v0.digest,),
        technique="chain_of_thought",
    )
    v2 = PromptVersion.of(TARGET, "Act on R2 too.", parents=(v0.digest,), technique="few_shot")
    steps: list[PromptVersion | PromptPromotion] = [
        v0,
        PromptPromotion(target=TARGET, version=v0.digest, reason="initial"),
        v1,
        v2,
        v0,  # recorded again: the same version, its first label stays
        PromptPromotion(
            target=TARGET,
            version=v2.digest,
            replaces=v0.digest,
            reason="beat v000 on every held-out scenario",
            rule="paired bootstrap lower bound > 0",
            figures={"difference": 0.2, "lower": 0.05},
        ),
    ]
    targets = fold_prompts(_record(tmp_path, steps))
    history = targets[TARGET]
    assert [r.label for r in history.versions] == ["v000", "v001", "v002"]
    assert [r.version.digest for r in history.versions] == [v0.digest, v1.digest, v2.digest]
    champion = history.champion
    assert champion is not None and champion.label == "v002"
    assert history.find("v002").version.parents == (v0.digest,)
    assert history.find(v1.digest[:8]).label == "v001"
    assert history.label_of(v0.digest) == "v000"
    with pytest.raises(PromptLookupError, match="is not a version of it"):
        history.find("v009")
    # the same log, the same answer
    assert fold_prompts(_record(tmp_path / "again", steps))[TARGET].champion.label == "v002"


def test_a_target_never_promoted__has_no_champion() -> None:
    assert fold_prompts([]) == {}
    v0 = PromptVersion.of(TARGET, "x")
    history = PromptTarget(TARGET, versions=[Recorded("v000", v0, "s", 0)])
    assert history.champion is None
    with pytest.raises(PromptLookupError, match="nothing was promoted"):
        history.find("champion")

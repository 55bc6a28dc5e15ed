"""Console pages rendered from folds without a server: a prompt target's rounds (the loop run
against a local OpenAI-compatible server, its events read back from the spool)."""

from __future__ import annotations

from pathlib import Path

from rolltape.infra.console._templates import make_environment
from rolltape.projections import fold_prompts
from rolltape.schemas import PromptVersion, read_event
from tests.unit.producers.recorded import spooled_records
from tests.unit.producers.test_prompt_loop import TARGET, MarkerTester, _loop, tuner_server


def test_a_prompt_targets_page_shows_each_round_its_decision_and_its_paired_cases(
    tmp_path: Path,
) -> None:
    base = PromptVersion.of(TARGET, "Act on the rule.", technique="base")
    proposals = [
        {"technique": "few_shot", "rationale": "<i>examples</i>", "prompt": "Act. BETTER WORSE"},
        {"technique": "negative_constraint", "rationale": "never defer", "prompt": "Act. BETTER"},
    ]
    with tuner_server(proposals, []) as server:
        loop = _loop(tmp_path, server, MarkerTester())
        loop.run(base, 2)
        loop.recorder.close(10)
    events = [read_event(v) for v in spooled_records(tmp_path / "spool")]
    history = fold_prompts((e.session_id, e) for e in events)[TARGET]
    html = (
        make_environment()
        .get_template("prompt.html")
        .render(
            store="sqlite:x",
            title="t",
            section="prompts",
            history=history,
            said=None,
            promoted={p.promotion.version: p.promotion.reason for p in history.promotions},
        )
    )
    assert html.count('<article class="round"') == 2
    assert "the proposal regressed secret (seed 1)" in html
    assert html.count('<td class="text">secret</td>') == 4  # two held-out seeds, two rounds
    assert "&lt;i&gt;examples&lt;/i&gt;" in html and "<i>" not in html
    assert "<strong>champion</strong>" in html and "Act. BETTER</pre>" in html

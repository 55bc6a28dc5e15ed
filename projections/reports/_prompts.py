"""The prompt loop's page (`rolltape report --prompts TARGET`): a target's lineage, the
scoreboard (wins and losses per technique, pass rates and mean scores per round), every round's
decision with its rule, figures and per-case results, and the champion's text.

Everything on it is folded from the log (rolltape.projections.fold_prompts); the same history
gives the same bytes.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rolltape.projections._prompts import PromptTarget
from rolltape.projections.reports._page import _e, _Figures, page
from rolltape.schemas import PromptDecision


def _rate(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _lineage(history: PromptTarget) -> str:
    champion = history.champion
    promoted = {p.promotion.version: p.promotion.reason for p in history.promotions}
    rows = []
    for recorded in history.versions:
        v = recorded.version
        is_champion = champion is not None and champion.version.digest == v.digest
        rows.append(
            f"<tr><td>{_e(recorded.label)}{' <b>champion</b>' if is_champion else ''}</td>"
            f'<td class="hash">{_e(v.digest[:16])}</td>'
            f"<td>{_e(', '.join(history.label_of(p) for p in v.parents) or '-')}</td>"
            f"<td>{_e(v.technique or '-')}</td><td>{_e(v.rationale or '-')}</td>"
            f"<td>{_e(promoted.get(v.digest, ''))}</td></tr>"
        )
    return (
        '<table id="lineage"><tr><th>version</th><th>digest</th><th>parents</th>'
        "<th>technique</th><th>rationale</th><th>promoted because</th></tr>"
        f"{''.join(rows)}</table>"
    )


def _scoreboard(history: PromptTarget, figures: _Figures) -> str:
    tallies = history.scoreboard()
    rounds = history.rounds()
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("wins and losses per technique", "held-out pass rate per round"),
    )
    names = [t.technique for t in tallies]
    fig.add_trace(
        go.Bar(x=names, y=[t.wins for t in tallies], name="wins", marker_color="#137333"),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(x=names, y=[t.losses for t in tallies], name="losses", marker_color="#b3261e"),
        row=1,
        col=1,
    )
    numbers = list(range(1, len(rounds) + 1))
    for key, label, dash in (
        ("champion_pass_rate", "champion pass rate", "solid"),
        ("proposal_pass_rate", "proposal pass rate", "dash"),
    ):
        fig.add_trace(
            go.Scatter(
                x=numbers,
                y=[getattr(r.decision.figures, key) for r in rounds],
                mode="lines+markers",
                name=label,
                line={"dash": dash},
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="round", dtick=1, row=1, col=2)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    fig.update_layout(barmode="group", height=340, title="scoreboard")
    table = "".join(
        f"<tr><td>{_e(t.technique)}</td><td>{t.wins}</td><td>{t.losses}</td></tr>" for t in tallies
    )
    return (
        figures.html(fig)
        + '<table id="scoreboard"><tr><th>technique</th><th>wins</th><th>losses</th></tr>'
        + (table or '<tr><td colspan="3" class="muted">no rounds judged yet</td></tr>')
        + "</table>"
    )


def _pairs_chart(d: PromptDecision, number: int, figures: _Figures) -> str:
    cases = [p.label for p in d.pairs]
    fig = go.Figure()
    for role, color in (("champion", "#5f6368"), ("proposal", "#1a73e8")):
        fig.add_trace(
            go.Bar(
                x=cases,
                y=[getattr(p, f"{role}_score") for p in d.pairs],
                name=role,
                marker_color=color,
                text=["pass" if getattr(p, f"{role}_passed") else "fail" for p in d.pairs],
                textposition="outside",
            )
        )
    fig.update_yaxes(rangemode="tozero", title_text="score")
    fig.update_layout(barmode="group", height=300, title=f"round {number}: paired held-out results")
    return figures.html(fig)


def _round(history: PromptTarget, number: int, d: PromptDecision, figures: _Figures) -> str:
    f = d.figures
    interval = "-" if f.lower is None else f"[{f.lower:+.3f}, {f.upper:+.3f}]"
    proposal = history.by_digest().get(d.proposal)
    technique = (proposal.version.technique if proposal else None) or "-"
    rows = "".join(
        f"<tr><td>{_e(p.case)}</td><td>{p.seed}</td>"
        f"<td>{_rate(p.champion_score, 3)} {'pass' if p.champion_passed else 'fail'}</td>"
        f"<td>{_rate(p.proposal_score, 3)} {'pass' if p.proposal_passed else 'fail'}</td>"
        f'<td class="hash">{_e(p.champion_session or "-")}<br>{_e(p.proposal_session or "-")}</td>'
        "</tr>"
        for p in d.pairs
    )
    verdict = "ok" if d.promoted else "failed"
    return "\n".join(
        [
            f'<h3 id="round-{number}">round {number}: {_e(history.label_of(d.proposal))} '
            f"({_e(technique)}) against {_e(history.label_of(d.champion))}</h3>",
            f'<p><span class="{verdict}">{_e(d.outcome)}</span>: {_e(d.reason)}</p>',
            f"<p>rule: {_e(d.rule.describe())}</p>",
            f"<p>reviewer: {_e(d.reviewed)}</p>" if d.reviewed is not None else "",
            f"<p>mean difference {_rate(f.mean_difference, 3)}, interval {_e(interval)}; pass "
            f"rate {_rate(f.champion_pass_rate)} &rarr; {_rate(f.proposal_pass_rate)}; mean "
            f"score {_rate(f.champion_mean, 3)} &rarr; {_rate(f.proposal_mean, 3)}; loop "
            f"<code>{_e(d.loop)}</code> round {d.round}</p>",
            _pairs_chart(d, number, figures),
            "<table><tr><th>case</th><th>seed</th><th>champion</th><th>proposal</th>"
            f"<th>sessions (champion, proposal)</th></tr>{rows}</table>",
        ]
    )


def render_prompts(history: PromptTarget, *, title: str) -> str:
    """The page about one prompt target."""
    figures = _Figures()
    champion = history.champion
    sections = [
        f"<h2>{_e(history.name)}</h2>",
        "<p>champion: "
        + (
            f"<b>{_e(champion.label)}</b> <code>{_e(champion.version.digest[:16])}</code>"
            if champion
            else '<span class="muted">none (nothing promoted)</span>'
        )
        + f"; {len(history.versions)} version(s), {len(history.decisions)} round(s) judged</p>",
        "<h2>lineage</h2>",
        _lineage(history),
        "<h2>scoreboard</h2>",
        _scoreboard(history, figures),
        "<h2>rounds</h2>",
    ]
    rounds = history.rounds()
    sections += [_round(history, n, r.decision, figures) for n, r in enumerate(rounds, 1)]
    if not rounds:
        sections.append('<p class="muted">No round was judged yet.</p>')
    if champion is not None:
        sections += [
            f"<h2>the champion's text ({_e(champion.label)})</h2>",
            f'<div class="message">{_e(champion.version.content)}</div>',
        ]
    return page(title, sections)

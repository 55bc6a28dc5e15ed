"""The run report: one self-contained HTML page (plotly's JavaScript inlined, no network) with,
per training run, train/val curves per attempt, each attempt's rule heatmap with its decision
markers, the decisions timeline, both scores per attempt and the violations with their
evidence; agent sessions get their conversation, tool calls, filter outcome and verdicts.

Deterministic: the same views give the same bytes (figure ids are numbered, not random).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from rolltape.projections._trajectory import Trajectory
from rolltape.projections.reports._run import RunView, TrainingView
from rolltape.schemas import PRECEDENCE

RULES = PRECEDENCE
"""The heatmap's rows, top to bottom: the precedence order, most urgent first."""
ACTIONS = ("hyperparameter_change", "architecture_change")

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #1d2330; max-width: 1200px; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.25rem; margin-top: 2.5rem; border-bottom: 1px solid #ccd; }
h3 { font-size: 1.05rem; margin-top: 1.5rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.85rem; width: 100%; }
th, td { border: 1px solid #d5d9e2; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f1f3f8; }
.ok { color: #137333; } .failed { color: #b3261e; font-weight: bold; } .muted { color: #667; }
code, .hash { font-family: ui-monospace, monospace; font-size: 0.8rem; }
.message { border-left: 3px solid #ccd; padding: 0.25rem 0.75rem; margin: 0.5rem 0; white-space: pre-wrap; }
.role { font-weight: bold; text-transform: uppercase; font-size: 0.75rem; color: #556; }
.reasoning { color: #556; font-style: italic; }
"""


class _Figures:
    def __init__(self) -> None:
        self.count = 0

    def html(self, fig: go.Figure) -> str:
        self.count += 1
        fig.update_layout(template="plotly_white", margin={"l": 60, "r": 20, "t": 50, "b": 40})
        return str(
            fig.to_html(
                full_html=False,
                include_plotlyjs=False,
                div_id=f"figure-{self.count}",
                config={"displaylogo": False, "responsive": True},
            )
        )


def _e(value: Any) -> str:
    return html.escape(str(value))


def _label(view: TrainingView) -> str:
    return f"attempt {view.attempt}" if view.attempt is not None else view.session_id


def _scores(view: TrainingView) -> str:
    if view.verdict is None:
        return '<span class="muted">not judged yet</span>'
    v = view.verdict
    parts = ", ".join(f"{k} {x:.3f}" for k, x in sorted(v.scores.items()))
    return (
        f'<span class="{"failed" if v.status != "ok" else "ok"}">{_e(v.status)}</span> {_e(parts)}'
    )


def _curves(run: RunView, figures: _Figures) -> str:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("loss", "accuracy"))
    palette = qualitative.D3
    for index, view in enumerate(run.attempts):
        color = palette[index % len(palette)]
        epochs = [e.epoch for e in view.epochs if e.metric is not None]
        metrics = [e.metric for e in view.epochs if e.metric is not None]
        for col, fields in ((1, ("train_loss", "val_loss")), (2, ("train_acc", "val_acc"))):
            for field in fields:
                fig.add_trace(
                    go.Scatter(
                        x=epochs,
                        y=[getattr(m, field) for m in metrics],
                        mode="lines+markers",
                        name=f"{_label(view)} {field.split('_')[0]}",
                        legendgroup=_label(view),
                        line={
                            "dash": "dash" if field.startswith("train") else "solid",
                            "color": color,
                        },
                        showlegend=col == 1,
                    ),
                    row=1,
                    col=col,
                )
    fig.update_xaxes(title_text="epoch")
    fig.update_layout(height=360, title="train (dashed) and validation (solid) per attempt")
    return figures.html(fig)


def _markers(view: TrainingView) -> dict[str, tuple[list[int], list[str], list[str]]]:
    """kind -> (epochs, rules, hover texts) for the heatmap's decision markers."""
    out: dict[str, tuple[list[int], list[str], list[str]]] = {
        k: ([], [], []) for k in ("actioned", "deferred", "missed", "waived")
    }

    def add(kind: str, epoch: int, rule: str, text: str) -> None:
        xs, ys, texts = out[kind]
        xs.append(epoch)
        ys.append(rule)
        texts.append(text)

    for d in view.decisions:
        kind = "actioned" if d.decision.event_type in ACTIONS else "deferred"
        for rule in d.decision.cites:
            add(
                kind, d.decision.epoch, rule, f"{d.decision.event_type}: {d.decision.justification}"
            )
    if view.verdict is not None:
        for v in view.verdict.violations:
            if v.code == "missing_decision" and v.rule and v.epoch is not None:
                add("missed", v.epoch, v.rule, v.message)
    for e in view.epochs:
        if e.evaluation is not None:
            for rule in e.evaluation.fired:
                if rule in view.waived:
                    add("waived", e.epoch, rule, f"{rule} waived in the run config")
    return out


_MARKER_STYLE = {
    "actioned": {"symbol": "triangle-up", "color": "#137333", "size": 13},
    "deferred": {"symbol": "diamond", "color": "#e37400", "size": 11},
    "missed": {"symbol": "x", "color": "#b3261e", "size": 14},
    "waived": {"symbol": "circle-open", "color": "#5f6368", "size": 13},
}


def _heatmap(view: TrainingView, figures: _Figures) -> str:
    epochs = [e.epoch for e in view.epochs]
    z: list[list[float | None]] = []
    hover: list[list[str]] = []
    for rule in RULES:
        row: list[float | None] = []
        texts: list[str] = []
        for e in view.epochs:
            if e.evaluation is None:
                row.append(None)
                texts.append("no rule evaluation")
                continue
            fired = rule in e.evaluation.fired
            row.append(1.0 if fired else 0.0)
            texts.append(e.evaluation.rules[rule].reason if rule in e.evaluation.rules else "")
        z.append(row)
        hover.append(texts)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=epochs,
            y=list(RULES),
            text=hover,
            hovertemplate="epoch %{x} %{y}: %{text}<extra></extra>",
            colorscale=[[0, "#eef1f6"], [1, "#f4a7a0"]],
            zmin=0,
            zmax=1,
            showscale=False,
            xgap=2,
            ygap=2,
        )
    )
    for kind, (xs, ys, texts) in _markers(view).items():
        if xs:
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="markers",
                    name=kind,
                    marker=_MARKER_STYLE[kind],
                    text=texts,
                    hovertemplate=f"{kind} at epoch %{{x}} (%{{y}}): %{{text}}<extra></extra>",
                )
            )
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=list(RULES))
    fig.update_xaxes(title_text="epoch", dtick=1)
    fig.update_layout(
        height=330, title=f"{_label(view)}: rules fired per epoch (red) and decisions"
    )
    return figures.html(fig)


def _score_chart(run: RunView, figures: _Figures) -> str:
    labels = [_label(a) for a in run.attempts]
    fig = go.Figure()
    for key in ("process_score", "accuracy_score"):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[a.verdict.scores.get(key, 0.0) if a.verdict else None for a in run.attempts],
                name=key,
            )
        )
    fig.update_yaxes(range=[0, 1.05])
    fig.update_layout(barmode="group", height=300, title="the judge's two scores per attempt")
    return figures.html(fig)


def _decisions_table(view: TrainingView) -> str:
    if not view.decisions:
        return '<p class="muted">No decisions were recorded.</p>'
    rows = []
    for d in view.decisions:
        x = d.decision
        p = x.remedy_params
        params = {k: v for k, v in p.model_dump().items() if v not in (None, "none")}
        rows.append(
            f"<tr><td>{x.epoch}</td><td>{_e(x.event_type)}</td><td>{_e(', '.join(x.cites))}</td>"
            f"<td>{_e(x.remedy_direction)}</td><td><code>{_e(json.dumps(params))}</code></td>"
            f"<td>{_e(x.justification)}</td></tr>"
        )
    return (
        "<table><tr><th>epoch</th><th>event</th><th>cites</th><th>remedy</th><th>params</th>"
        f"<th>justification</th></tr>{''.join(rows)}</table>"
    )


def _violations_table(view: TrainingView) -> str:
    if view.verdict is None:
        return ""
    if not view.verdict.violations:
        return '<p class="ok">No violations.</p>'
    rows = "".join(
        f"<tr><td>{_e(v.code)}</td><td>{_e(v.rule or '')}</td><td>{_e('' if v.epoch is None else v.epoch)}</td>"
        f'<td>{_e(v.message)}</td><td class="hash">{"<br>".join(_e(h[:16]) for h in v.evidence)}</td></tr>'
        for v in view.verdict.violations
    )
    return (
        "<table><tr><th>violation</th><th>rule</th><th>epoch</th><th>what</th>"
        f"<th>evidence (event hashes)</th></tr>{rows}</table>"
    )


def _gates(view: TrainingView) -> str:
    if view.verdict is None:
        return ""
    details = view.verdict.details
    items = []
    for key in ("architecture_replay", "live_check", "accuracy_source", "waived_rules"):
        if key in details:
            items.append(f"<li><b>{_e(key)}</b>: <code>{_e(json.dumps(details[key]))}</code></li>")
    specs = " &rarr; ".join(
        f"{_e(s.phase)}@{s.epoch}: {_e(s.activation)} / {s.weight_layers} weight layers / "
        f"{'BN' if s.batchnorm_layers else 'no BN'}"
        for s in view.specs
    )
    if specs:
        items.append(f"<li><b>model specs the monitor saw</b>: {specs}</li>")
    return f"<ul>{''.join(items)}</ul>"


def _run_section(run: RunView, figures: _Figures) -> str:
    first = run.attempts[0]
    mode = first.run_config.get("mode")
    best = run.best
    parts = [
        f'<h2>{_e(first.task)} <span class="muted">{_e(run.group_id or "")}</span></h2>',
        f"<p>{len(run.attempts)} attempt(s)"
        + (f", mode <code>{_e(mode)}</code>" if mode else "")
        + (f"; best: {_e(_label(best))} ({_e(best.session_id)})" if best else "")
        + "</p>",
        "<table><tr><th>attempt</th><th>session</th><th>status</th><th>verdict</th>"
        "<th>epochs</th><th>decisions</th></tr>"
        + "".join(
            f"<tr><td>{_e(_label(a))}</td><td><code>{_e(a.session_id)}</code></td>"
            f"<td>{_e(a.status)}</td><td>{_scores(a)}</td><td>{len(a.epochs)}</td>"
            f"<td>{len(a.decisions)}</td></tr>"
            for a in run.attempts
        )
        + "</table>",
        _curves(run, figures),
        _score_chart(run, figures),
    ]
    for view in run.attempts:
        parts += [
            f"<h3>{_e(_label(view))}: <code>{_e(view.session_id)}</code></h3>",
            _heatmap(view, figures),
            '<p class="muted">Markers: &#9650; actioned, &#9670; deferred, &#10005; missed '
            "(no decision in the window), &#9675; waived.</p>",
            _decisions_table(view),
            _violations_table(view),
            _gates(view),
        ]
    return "\n".join(parts)


def _agent_section(t: Trajectory) -> str:
    parts = [f"<h2>agent session <code>{_e(t.session_id)}</code></h2>"]
    parts.append(
        f"<p>task: {_e(t.task)}; status {_e(t.status)}; model {_e(t.model or '-')}"
        + (f"; linked to <code>{_e(t.linked_session_id)}</code>" if t.linked_session_id else "")
        + "</p>"
    )
    if t.filter is not None:
        verdict = "accepted" if t.filter.accepted else "rejected"
        reasons = "; ".join(f"{r.code}: {r.message}" for r in t.filter.reasons) or "no reasons"
        parts.append(f"<p>reward filter: <b>{verdict}</b> ({_e(reasons)})</p>")
    for v in t.verdicts:
        scores = ", ".join(f"{k} {x:.3f}" for k, x in sorted(v.scores.items()))
        parts.append(f"<p>verdict {_e(v.judge)}: {_e(v.status)} {_e(scores)}</p>")
    for m in t.messages:
        body = [f'<div class="role">{_e(m.role)}</div>']
        if m.reasoning:
            body.append(f'<div class="reasoning">{_e(m.reasoning)}</div>')
        body.append(f"<div>{_e(m.content)}</div>")
        for call in m.tool_calls:
            result = call.result
            outcome = (
                "no result"
                if result is None
                else f"{'ok' if result.success else 'failed'}: {result.content[:2000]}"
            )
            body.append(
                f"<div><code>{_e(call.name)}({_e(json.dumps(call.arguments))})</code> &rarr; "
                f"{_e(outcome)}</div>"
            )
        parts.append(f'<div class="message">{"".join(body)}</div>')
    return "\n".join(parts)


def render_report(runs: Iterable[RunView], agents: Iterable[Trajectory] = (), *, title: str) -> str:
    """The page: plotly's JavaScript once in the head, then a section per run and session."""
    figures = _Figures()
    sections = [_run_section(run, figures) for run in runs]
    sections += [_agent_section(t) for t in agents]
    if not sections:
        sections = ['<p class="muted">No sessions matched.</p>']
    return page(title, sections)


def page(title: str, sections: list[str]) -> str:
    """A self-contained page: plotly's JavaScript once in the head, then the sections."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<h1>{_e(title)}</h1>\n" + "\n".join(sections) + "\n</body></html>\n"
    )

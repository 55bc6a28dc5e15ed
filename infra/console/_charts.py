"""The small charts beside the sessions list, drawn on the server as SVG: the geometry of
stacked bars from the read model's counts (`IndexStore.reward_bins`, `outcomes_by_day`,
`tool_failures`), rendered by the `chart.svg` template (labels escaped like every text).

An SVG shown as an image runs no script and loads nothing, so a tool's name that holds markup
is still a label. The same counts give the same bytes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from rolltape.infra.index import DayOutcomes, RewardBin, ToolFailures

WIDTH = 420
HEIGHT = 170
_TOP = 24
_BOTTOM = 34
_LEFT = 8


class Segment(BaseModel):
    model_config = ConfigDict(frozen=True)

    y: float
    height: float
    css: str
    """ok, bad or muted: what the part counts."""
    title: str


class Bar(BaseModel):
    model_config = ConfigDict(frozen=True)

    x: float
    width: float
    label: str
    label_x: float
    segments: tuple[Segment, ...]


class Chart(BaseModel):
    model_config = ConfigDict(frozen=True)

    title: str
    width: int = WIDTH
    height: int = HEIGHT
    bars: tuple[Bar, ...]
    empty: str | None = None
    """What the chart says when it has nothing to draw."""
    baseline: float = HEIGHT - _BOTTOM


def _stacked(
    title: str, columns: Sequence[tuple[str, Sequence[tuple[int, str, str]]]], empty: str
) -> Chart:
    """Columns of (label, parts (count, css, title)), scaled to the tallest column."""
    tallest = max((sum(n for n, _, _ in parts) for _, parts in columns), default=0)
    if not columns or tallest == 0:
        return Chart(title=title, bars=(), empty=empty)
    room = HEIGHT - _TOP - _BOTTOM
    slot = (WIDTH - 2 * _LEFT) / len(columns)
    bars = []
    for i, (label, parts) in enumerate(columns):
        y = float(HEIGHT - _BOTTOM)
        segments = []
        for n, css, part_title in parts:
            h = room * n / tallest
            y -= h
            if n:
                segments.append(
                    Segment(y=round(y, 2), height=round(h, 2), css=css, title=part_title)
                )
        x = _LEFT + i * slot + slot * 0.1
        bars.append(
            Bar(
                x=round(x, 2),
                width=round(slot * 0.8, 2),
                label=label,
                label_x=round(x + slot * 0.4, 2),
                segments=tuple(segments),
            )
        )
    return Chart(title=title, bars=tuple(bars))


def reward_chart(bins: Sequence[RewardBin], name: str) -> Chart:
    columns = [
        (
            f"{b.low:.3g}",
            [(b.sessions, "muted", f"{b.sessions} with {name} {b.low:.3g} to {b.high:.3g}")],
        )
        for b in bins
    ]
    return _stacked(f"{name}: sessions by value", columns, f"no session has a reward named {name}")


def outcomes_chart(days: Sequence[DayOutcomes]) -> Chart:
    columns = []
    for d in days:
        day = dt.datetime.fromtimestamp(d.day_ms / 1000, dt.UTC).strftime("%m-%d")
        columns.append(
            (
                day,
                [
                    (d.accepted, "ok", f"{day}: {d.accepted} accepted"),
                    (d.rejected, "bad", f"{day}: {d.rejected} rejected"),
                    (d.unfiltered, "muted", f"{day}: {d.unfiltered} without a filter outcome"),
                ],
            )
        )
    return _stacked("filter outcomes by day started (UTC)", columns, "no session started yet")


def tools_chart(tools: Sequence[ToolFailures]) -> Chart:
    columns = [
        (
            t.tool if len(t.tool) <= 12 else t.tool[:11] + "…",
            [
                (
                    t.calls - t.failed,
                    "ok",
                    f"{t.tool}: {t.calls - t.failed} of {t.calls} calls succeeded",
                ),
                (t.failed, "bad", f"{t.tool}: {t.failed} of {t.calls} calls failed"),
            ],
        )
        for t in tools
    ]
    return _stacked("tool calls, failed in red", columns, "no tool was called")


class Line(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    dashed: bool
    color: str
    points: str
    """The SVG polyline's points, `x,y x,y ...`."""


class LineChart(BaseModel):
    """Series over epochs, scaled into one box (a training session's curves)."""

    model_config = ConfigDict(frozen=True)

    title: str
    width: int = WIDTH
    height: int = HEIGHT
    lines: tuple[Line, ...]
    low: str
    high: str
    """The value axis' ends, as labels."""
    first: int
    last: int
    """The epochs at the ends of the other axis."""


_COLORS = ("#2f5bd3", "#c8463d", "#3c9a5f", "#8a5a00")


def line_chart(
    title: str, series: Sequence[tuple[str, bool, Sequence[tuple[int, float]]]]
) -> LineChart | None:
    """Each series (name, dashed, (epoch, value) points) as a line; None with no point."""
    points = [p for _, _, pts in series for p in pts]
    if not points:
        return None
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if y1 == y0:
        y1 = y0 + 1.0
    left, right, top, bottom = 44, WIDTH - 10, _TOP, HEIGHT - _BOTTOM

    def at(x: int, y: float) -> str:
        px = left + (right - left) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5)
        py = bottom - (bottom - top) * (y - y0) / (y1 - y0)
        return f"{px:.1f},{py:.1f}"

    lines = tuple(
        Line(
            name=name,
            dashed=dashed,
            color=_COLORS[(i // 2) % len(_COLORS)],
            points=" ".join(at(x, y) for x, y in pts),
        )
        for i, (name, dashed, pts) in enumerate(series)
        if pts
    )
    return LineChart(title=title, lines=lines, low=f"{y0:.3g}", high=f"{y1:.3g}", first=x0, last=x1)


__all__ = ["Chart", "LineChart", "line_chart", "outcomes_chart", "reward_chart", "tools_chart"]

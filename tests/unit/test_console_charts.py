"""The console's charts, drawn on the server: bars scaled to the tallest column, a training
session's curves from its metrics chain, and recorded names kept as text in the SVG."""

from __future__ import annotations

from rolltape.infra.console._charts import line_chart, tools_chart
from rolltape.infra.console._reading import _curves
from rolltape.infra.console._templates import make_environment
from rolltape.infra.index import ToolFailures
from rolltape.schemas import Stream, read_event
from tests.support.index_log import Log


def test_bars_stack_to_the_tallest_column_and_a_tool_name_with_markup_stays_a_label() -> None:
    chart = tools_chart(
        [
            ToolFailures(tool="shell", calls=10, failed=5),
            ToolFailures(tool="<b>x</b>", calls=5, failed=0),
        ]
    )
    shell, other = chart.bars
    assert [s.css for s in shell.segments] == ["ok", "bad"]
    assert sum(s.height for s in shell.segments) == 2 * sum(s.height for s in other.segments)
    svg = make_environment().get_template("chart.svg").render(chart=chart)
    assert "&lt;b&gt;x&lt;/b&gt;" in svg and "<b>" not in svg
    assert tools_chart([]).empty == "no tool was called"


def test_a_training_sessions_curves_come_from_its_metrics_and_an_agents_has_none() -> None:
    log = Log()
    records = [
        log.record(Stream.EVENTS, "t1", "session_started", {"task": "digits", "kind": "training"})
    ]
    for epoch in range(3):
        metric = {
            "epoch": epoch,
            "train_loss": 2.0 - epoch,
            "val_loss": 2.1 - epoch,
            "val_acc": 0.3 * epoch,
        }
        records.append(log.record(Stream.METRICS, "t1", "metric", metric))
    events = [read_event(r.value) for r in records if r.value is not None]
    loss, accuracy = _curves(events)
    assert [line.name for line in loss.lines] == ["train loss", "val loss"]
    assert [line.dashed for line in loss.lines] == [True, False]
    assert (loss.first, loss.last, loss.low, loss.high) == (0, 2, "0", "2.1")
    assert [line.name for line in accuracy.lines] == ["val acc"]  # no train accuracy recorded
    assert len(accuracy.lines[0].points.split()) == 3
    agent = [read_event(log.record(Stream.EVENTS, "a1", "session_started", {"task": "t"}).value)]
    assert _curves(agent) == ()  # type: ignore[arg-type]
    assert line_chart("nothing", [("x", False, [])]) is None

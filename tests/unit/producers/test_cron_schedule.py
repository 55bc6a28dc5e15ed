"""Schedules: the three accepted forms, clear errors, and next/latest ticks across DST and
month ends."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from rolltape.producers.cron import ScheduleError, parse_schedule

_NS = 1_000_000_000


def _ns(dt: datetime) -> int:
    return int(dt.timestamp()) * _NS


def _at(ns: int, zone: str = "UTC") -> str:
    return datetime.fromtimestamp(ns // _NS, ZoneInfo(zone)).isoformat()


@pytest.mark.parametrize(
    ("spec", "cron", "every_s"),
    [
        ("*/15 * * * *", "*/15 * * * *", None),
        ("0 9 * * MON-FRI", "0 9 * * MON-FRI", None),
        ("30 0 9 * * *", "30 0 9 * * *", None),
        ("every 6h", None, 21600),
        ("every 30m", None, 1800),
        ("every 90s", None, 90),
        ("every 1h30m", None, 5400),
        ("every 15 minutes", None, 900),
        ("every 2 days", None, 172800),
        ("hourly", "0 * * * *", None),
        ("@daily", "0 0 * * *", None),
        ("daily at 09:00", "0 9 * * *", None),
        ("Daily at 9pm", "0 21 * * *", None),
        ("weekdays at 8:30am", "30 8 * * 1-5", None),
        ("weekly on monday at 09:00", "0 9 * * 1", None),
        ("every friday at 17:00", "0 17 * * 5", None),
        ("monthly on the 1st at 06:00", "0 6 1 * *", None),
        ("@yearly", "0 0 1 1 *", None),
    ],
)
def test_parse_schedule__reads_cron_expressions_intervals_and_phrases(
    spec: str, cron: str | None, every_s: int | None
) -> None:
    schedule = parse_schedule(spec)
    assert (schedule.cron, schedule.every_s) == (cron, every_s)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("", "it is empty"),
        ("sometimes", "neither a cron expression, an interval nor a known phrase"),
        ("every 6 parsecs", "unknown unit 'parsecs'"),
        ("every 0s", "at least one second"),
        ("daily at 25:00", "'25:00' is not a time of day"),
        ("daily at 13pm", "with am/pm the hour is 1 to 12"),
        ("every funday at 9", "'funday' is not a day of the week"),
        ("monthly on the 32nd", "day of month 32"),
        ("61 * * * *", "Bad minute"),
        ("0 0 30 2 *", "cannot read schedule"),
    ],
)
def test_parse_schedule__a_bad_spec_says_why_and_lists_what_is_accepted(
    spec: str, why: str
) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(spec)
    message = str(caught.value)
    assert why in message
    assert "every 6h" in message and "daily at 09:00" in message and "*/15 * * * *" in message


def test_parse_schedule__an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Olympus'"):
        parse_schedule("daily", "Mars/Olympus")


def test_interval__ticks_count_from_the_anchor_and_the_latest_missed_tick_is_owed_once() -> None:
    schedule = parse_schedule("every 10m")
    anchor = _ns(datetime(2026, 1, 1, 12, 0, 7, tzinfo=UTC))
    assert schedule.next_due(anchor, anchor) == anchor + 600 * _NS
    # A scheduler down for 55 minutes owes one run: the 50-minute tick.
    now = anchor + 55 * 60 * _NS
    assert schedule.latest_due(anchor, now, anchor) == anchor + 50 * 60 * _NS
    assert schedule.latest_due(anchor + 50 * 60 * _NS, now, anchor) is None
    assert schedule.latest_due(anchor, anchor + 599 * _NS, anchor) is None
    assert schedule.latest_due(anchor, anchor + 600 * _NS, anchor) == anchor + 600 * _NS


def test_cron__month_ends_skip_months_without_the_day_and_february_29_waits_for_a_leap_year() -> (
    None
):
    on_31 = parse_schedule("0 6 31 * *")
    start = _ns(datetime(2026, 1, 31, 7, tzinfo=UTC))
    assert _at(on_31.next_due(start, 0)) == "2026-03-31T06:00:00+00:00"
    leap = parse_schedule("0 0 29 2 *")
    assert _at(leap.next_due(start, 0)) == "2028-02-29T00:00:00+00:00"
    last_of_month = parse_schedule("monthly on the 30th at 23:59")
    assert _at(last_of_month.next_due(_ns(datetime(2026, 2, 1, tzinfo=UTC)), 0)) == (
        "2026-03-30T23:59:00+00:00"
    )


def test_cron__a_time_the_clocks_skip_runs_once_right_after_the_change() -> None:
    zone = "America/New_York"  # 2026-03-08 02:00 -> 03:00
    schedule = parse_schedule("daily at 02:30", zone)
    start = _ns(datetime(2026, 3, 7, 12, tzinfo=ZoneInfo(zone)))
    first = schedule.next_due(start, 0)
    second = schedule.next_due(first, 0)
    assert _at(first, zone) == "2026-03-08T03:00:00-04:00"
    assert _at(second, zone) == "2026-03-09T02:30:00-04:00"


def test_cron__a_time_the_clocks_repeat_runs_once_and_the_wall_clock_stays_put() -> None:
    zone = "America/New_York"  # 2026-11-01 02:00 EDT -> 01:00 EST
    schedule = parse_schedule("daily at 01:30", zone)
    start = _ns(datetime(2026, 10, 31, 12, tzinfo=ZoneInfo(zone)))
    ticks = [schedule.next_due(start, 0)]
    for _ in range(2):
        ticks.append(schedule.next_due(ticks[-1], 0))
    assert [_at(t, zone) for t in ticks] == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
        "2026-11-03T01:30:00-05:00",
    ]
    # 25 real hours between the first two: the wall clock, not the interval, decides.
    assert ticks[1] - ticks[0] == 25 * 3600 * _NS


def test_cron__latest_due_finds_the_last_tick_at_or_before_now_in_the_job_zone() -> None:
    zone = "Europe/Berlin"
    schedule = parse_schedule("daily at 09:00", zone)
    now = _ns(datetime(2026, 11, 25, 9, 0, 0, tzinfo=ZoneInfo(zone)))
    assert schedule.latest_due(now - 3 * 86400 * _NS, now, 0) == now
    assert schedule.latest_due(now, now + 3600 * _NS, 0) is None
    week_later = now + 7 * 86400 * _NS + 3600 * _NS
    assert schedule.latest_due(now, week_later, 0) == now + 7 * 86400 * _NS


def test_interval__ignores_daylight_saving() -> None:
    schedule = parse_schedule("every 1h", "America/New_York")
    anchor = _ns(datetime(2026, 11, 1, 0, 30, tzinfo=ZoneInfo("America/New_York")))
    ticks = [schedule.next_due(anchor, anchor)]
    for _ in range(3):
        ticks.append(schedule.next_due(ticks[-1], anchor))
    assert {b - a for a, b in itertools.pairwise(ticks)} == {3600 * _NS}


def test_cron__a_missed_tick_in_the_repeated_hour_is_not_owed_twice() -> None:
    zone = "America/New_York"
    schedule = parse_schedule("daily at 01:30", zone)
    first = _ns(datetime(2026, 11, 1, 1, 30, tzinfo=ZoneInfo(zone)))  # EDT, fold=0
    second_pass = first + 3600 * _NS + 20 * 60 * _NS  # 01:50 EST
    assert schedule.latest_due(first, second_pass, 0) is None
    assert schedule.latest_due(first - 86400 * _NS, second_pass, 0) == first


def test_cron__a_wildcard_hour_fires_in_both_passes_of_the_repeated_hour() -> None:
    zone = "America/New_York"
    schedule = parse_schedule("*/30 * * * *", zone)
    start = _ns(datetime(2026, 11, 1, 0, 45, tzinfo=ZoneInfo(zone)))
    ticks = [schedule.next_due(start, 0)]
    for _ in range(3):
        ticks.append(schedule.next_due(ticks[-1], 0))
    assert [_at(t, zone) for t in ticks] == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00",
    ]

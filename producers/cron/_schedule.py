"""When a job is due: cron expressions, intervals and simple phrases.

Cron expressions are evaluated by `cronsim` (the library healthchecks.io runs its cron checks
on), which follows Debian cron through daylight saving changes: a job whose time falls in the
hour the clocks skip runs once right after the change, and one whose time the clocks repeat runs
once, at the first occurrence. Jobs with a wildcard hour fire on every real instant that matches,
so `*/30 * * * *` fires four times in the repeated hour's two passes. Intervals count real
seconds from the job's creation and ignore the wall clock. Phrases are compiled to cron
expressions, so they inherit its calendar and DST handling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from rolltape.producers._errors import ProducerError

ACCEPTED = (
    "a cron expression: 5 fields 'minute hour day-of-month month day-of-week' "
    "(e.g. '*/15 * * * *', '0 9 * * MON-FRI'), or 6 with seconds first",
    "an interval: 'every 6h', 'every 30m', 'every 90s', 'every 2d', 'every 1h30m', "
    "'every 15 minutes'",
    "a phrase: 'hourly', 'daily', 'daily at 09:00', 'weekdays at 8:30am', "
    "'weekly on monday at 09:00', 'every friday at 17:00', 'monthly on the 1st at 06:00', "
    "'@hourly', '@daily', '@weekly', '@monthly', '@yearly'",
)

_NS = 1_000_000_000
_UNITS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}
_DAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_ALIASES = {
    "@hourly": "0 * * * *",
    "hourly": "0 * * * *",
    "every hour": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "yearly": "0 0 1 1 *",
}
_AT = r"(?:\s+at\s+(?P<time>[0-9:apm ]+?))?"
_PHRASES = (
    (re.compile(rf"^(?:daily|every day){_AT}$"), "day"),
    (re.compile(rf"^(?:weekdays|every weekday|on weekdays){_AT}$"), "weekdays"),
    (re.compile(rf"^(?:weekly on|every|on) (?P<day>[a-z]+?)s?{_AT}$"), "weekday"),
    (
        re.compile(rf"^monthly on(?: the)? (?P<dom>[0-9]{{1,2}})(?:st|nd|rd|th)?{_AT}$"),
        "month",
    ),
)
_INTERVAL_PART = re.compile(r"([0-9]+)\s*([a-z]+)")
_TIME = re.compile(r"^(?P<h>[0-9]{1,2})(?::(?P<m>[0-9]{2}))?\s*(?P<ampm>am|pm)?$")


class ScheduleError(ProducerError, ValueError):
    """A schedule that cannot be read; the message says what is accepted."""


def _error(spec: str, why: str) -> ScheduleError:
    accepted = "\n".join(f"  - {form}" for form in ACCEPTED)
    return ScheduleError(f"cannot read schedule {spec!r}: {why}. Accepted:\n{accepted}")


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule: exactly one of `cron` (5 fields, or 6 with seconds first) and
    `every_s`."""

    text: str
    timezone: str
    cron: str | None = None
    every_s: int | None = None

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def describe(self) -> str:
        if self.every_s is not None:
            return f"every {_format_seconds(self.every_s)}"
        return f"cron '{self.cron}' ({self.timezone})"

    def next_due(self, after_ns: int, anchor_ns: int) -> int:
        """The first tick strictly after `after_ns` (and after the anchor)."""
        after_ns = max(after_ns, anchor_ns)
        if self.every_s is not None:
            step = self.every_s * _NS
            return anchor_ns + ((after_ns - anchor_ns) // step + 1) * step
        assert self.cron is not None
        start = datetime.fromtimestamp(after_ns // _NS, self.zone)
        return int(next(CronSim(self.cron, start)).timestamp()) * _NS

    def latest_due(self, after_ns: int, now_ns: int, anchor_ns: int) -> int | None:
        """The latest tick in (after_ns, now_ns], or None: the one run owed for every tick a
        stopped scheduler missed (missed ticks collapse into one run)."""
        after_ns = max(after_ns, anchor_ns)
        if now_ns <= after_ns:
            return None
        if self.every_s is not None:
            step = self.every_s * _NS
            tick = anchor_ns + (now_ns - anchor_ns) // step * step
        else:
            assert self.cron is not None
            # cronsim iterates backwards from before `dt`, or from `dt`'s whole second when it
            # has microseconds: one microsecond past the second makes the tick at `now` count.
            start = datetime.fromtimestamp(now_ns // _NS, self.zone) + timedelta(microseconds=1)
            tick = int(next(CronSim(self.cron, start, reverse=True)).timestamp()) * _NS
        return tick if tick > after_ns else None


def parse_schedule(spec: str, timezone: str = "UTC") -> Schedule:
    """Read a schedule; `ScheduleError` names what is accepted when it cannot be read."""
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(
            f"unknown time zone {timezone!r}: use an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from exc
    text = " ".join(spec.strip().split())
    lowered = text.lower()
    if not lowered:
        raise _error(spec, "it is empty")
    if lowered.startswith("every ") and _INTERVAL_PART.match(lowered[6:]):
        return Schedule(text=text, timezone=timezone, every_s=_interval(spec, lowered[6:]))
    if lowered in _ALIASES:
        return Schedule(text=text, timezone=timezone, cron=_checked(spec, _ALIASES[lowered]))
    phrase = _phrase(spec, lowered)
    if phrase is not None:
        return Schedule(text=text, timezone=timezone, cron=_checked(spec, phrase))
    fields = text.split()
    if len(fields) in (5, 6):
        return Schedule(text=text, timezone=timezone, cron=_checked(spec, text))
    raise _error(spec, "it is neither a cron expression, an interval nor a known phrase")


def _interval(spec: str, body: str) -> int:
    total, at = 0, 0
    for match in _INTERVAL_PART.finditer(body):
        between = body[at : match.start()].strip(" ,")
        if between not in ("", "and"):
            raise _error(spec, f"unexpected {between!r} in the interval")
        count, unit = int(match.group(1)), match.group(2)
        if unit not in _UNITS:
            raise _error(spec, f"unknown unit {unit!r} (s, m, h, d, w or their names)")
        total += count * _UNITS[unit]
        at = match.end()
    if body[at:].strip():
        raise _error(spec, f"unexpected {body[at:].strip()!r} after the interval")
    if total <= 0:
        raise _error(spec, "an interval must be at least one second")
    return total


def _phrase(spec: str, lowered: str) -> str | None:
    for pattern, shape in _PHRASES:
        match = pattern.match(lowered)
        if match is None:
            continue
        hour, minute = _clock(spec, match.group("time"))
        if shape == "day":
            return f"{minute} {hour} * * *"
        if shape == "weekdays":
            return f"{minute} {hour} * * 1-5"
        if shape == "weekday":
            day = match.group("day")
            names = [d for d in _DAYS if d == day or d[:3] == day]
            if not names:
                if day in ("day", "weekday"):
                    continue
                raise _error(spec, f"{day!r} is not a day of the week")
            return f"{minute} {hour} * * {_DAYS.index(names[0])}"
        dom = int(match.group("dom"))
        if not 1 <= dom <= 31:
            raise _error(spec, f"day of month {dom} is not between 1 and 31")
        return f"{minute} {hour} {dom} * *"
    return None


def _clock(spec: str, text: str | None) -> tuple[int, int]:
    if text is None:
        return 0, 0
    match = _TIME.match(text.strip())
    if match is None:
        raise _error(spec, f"{text.strip()!r} is not a time of day (09:00, 9am, 5:30pm)")
    hour, minute = int(match.group("h")), int(match.group("m") or 0)
    ampm = match.group("ampm")
    if ampm is not None:
        if not 1 <= hour <= 12:
            raise _error(spec, f"{text.strip()!r}: with am/pm the hour is 1 to 12")
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    if hour > 23 or minute > 59:
        raise _error(spec, f"{text.strip()!r} is not a time of day")
    return hour, minute


def _checked(spec: str, expression: str) -> str:
    """The expression, checked; 5 fields stay 5 (cronsim applies Debian cron's DST rules to
    those only: 6-field expressions are not cron's)."""
    try:
        next(CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC)))
    except (CronSimError, StopIteration) as exc:
        raise _error(spec, str(exc) or "no time ever matches") from exc
    return expression


def _format_seconds(seconds: int) -> str:
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            count, seconds = divmod(seconds, size)
            parts.append(f"{count}{unit}")
    return "".join(parts)

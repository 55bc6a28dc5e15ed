"""What a list of sessions shows, read from its URL and written back into links: the filters
live in the query string, so a view can be shared, bookmarked and reloaded as it was.

Pure: a query string's pairs in, a `ListQuery` out (or `BadQuery`, saying which parameter and
what it may be), and a `ListQuery` back out as a query string, in one fixed order so the same
view always has the same URL.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Literal
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, ValidationError

from rolltape.infra._errors import InfraError
from rolltape.infra.index import PAGE_MAX, SessionFilter, Sort
from rolltape.schemas import LIVE_JUDGE_VERSION

TAG_PARAMETERS = {"env": "env", "batch": "batch", "run": "run", "cron_job": "cron.job"}
"""URL parameter -> the tag key it asks for (`env=bugfix` is the tag `env=bugfix`)."""

PAGE_SIZE = 50


class BadQuery(InfraError, ValueError):
    """A URL parameter that cannot be read: the message names it and what it may hold."""


class ListQuery(BaseModel):
    """One view of the sessions list: its filters, its search words and where its page starts.
    Every field is one URL parameter of the same name (tags also by `env`, `batch`, `run` and
    `cron_job`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    q: str | None = None
    """Words to search the sessions' text for (every word must be there)."""
    task: str | None = None
    kind: Literal["agent", "training"] | None = None
    group: str | None = None
    """The samples of one group (`group_id`)."""
    status: Literal["completed", "interrupted", "failed", "running"] | None = None
    model: str | None = None
    tag: tuple[str, ...] = ()
    env: str | None = None
    batch: str | None = None
    run: str | None = None
    cron_job: str | None = None
    judge_version: str | None = None
    outcome: Literal["accepted", "rejected"] | None = None
    """The reward filter's outcome under the judge version."""
    reason: str | None = None
    judge: str | None = None
    verdict: Literal["ok", "failed", "error"] | None = None
    score: str | None = None
    """A verdict score's name under the judge version (`human`: a reviewer's, with
    `judge_version=human`); with `score_min`/`score_max` its bounds."""
    score_min: float | None = None
    score_max: float | None = None
    reward: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    tool: str | None = None
    tool_failed: bool | None = None
    rule: str | None = None
    chain: Literal["ok", "broken"] | None = None
    erased: bool | None = None
    reviewed: bool | None = None
    """A reviewer recorded a human verdict on it (true) or none did (false)."""
    disagreeing: bool | None = None
    """Its judges disagree under the judge version (one ok, one failed)."""
    since: dt.date | None = None
    """Started on or after this day (UTC)."""
    until: dt.date | None = None
    """Started before this day (UTC): the form calls it `before`."""
    sort: Sort = "newest"
    """The list's order (`newest`, `oldest`, `reward_high`, `reward_low`: the reward the
    `reward` filter names, `reward` by default). Not a filter: no chip."""
    cursor: str | None = None
    limit: int = PAGE_SIZE

    @classmethod
    def parse(cls, pairs: Iterable[tuple[str, str]]) -> ListQuery:
        """Read a query string's pairs: an empty value is no filter; an unknown parameter or a
        value out of its range is a `BadQuery` naming it."""
        values: dict[str, Any] = {}
        for name, value in pairs:
            value = value.strip()
            if not value:
                continue
            if name not in cls.model_fields:
                raise BadQuery(
                    f"the URL parameter {name!r} is not a filter of this list; it takes "
                    + ", ".join(sorted(cls.model_fields))
                )
            if name == "tag":
                values["tag"] = (*values.get("tag", ()), value)
            else:
                values[name] = value
        try:
            query = cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the query"
            raise BadQuery(f"the URL parameter {where!r}: {first['msg']}") from None
        if not 1 <= query.limit <= PAGE_MAX:
            raise BadQuery(f"the URL parameter 'limit' is 1 to {PAGE_MAX}, not {query.limit}")
        if query.reward is None and (query.reward_min is not None or query.reward_max is not None):
            query = query.model_copy(update={"reward": "reward"})
        if query.score is None and (query.score_min is not None or query.score_max is not None):
            raise BadQuery("the URL parameters 'score_min' and 'score_max' need 'score' (its name)")
        return query

    @property
    def version(self) -> str:
        return self.judge_version or LIVE_JUDGE_VERSION

    def where(self) -> SessionFilter:
        """The read model's filter for this view (the search words and page aside)."""
        tags = list(self.tag)
        for parameter, key in TAG_PARAMETERS.items():
            value = getattr(self, parameter)
            if value is not None:
                tags.append(f"{key}={value}")
        return SessionFilter(
            task=self.task,
            kind=self.kind,
            group_id=self.group,
            status=self.status,
            model=self.model,
            tags=tuple(tags),
            judge_version=self.version,
            accepted=None if self.outcome is None else self.outcome == "accepted",
            reason=self.reason,
            judge=self.judge,
            verdict_status=self.verdict,
            score=self.score,
            score_min=self.score_min,
            score_max=self.score_max,
            reward=self.reward,
            reward_min=self.reward_min,
            reward_max=self.reward_max,
            tool=self.tool,
            tool_failed=self.tool_failed,
            rule=self.rule,
            chain=self.chain,
            erased=self.erased,
            reviewed=self.reviewed,
            disagreeing=self.disagreeing,
            since_ms=None if self.since is None else _day_ms(self.since),
            until_ms=None if self.until is None else _day_ms(self.until),
        )

    def params(self, **changes: Any) -> list[tuple[str, str]]:
        """This view's URL parameters (with `changes` applied; None removes one), in the
        fields' order, defaults left out."""
        merged = self.model_copy(update=changes)
        out: list[tuple[str, str]] = []
        for name, field in type(self).model_fields.items():
            value = getattr(merged, name)
            if value is None or value == field.default:
                continue
            if name == "tag":
                out.extend(("tag", v) for v in value)
            elif isinstance(value, bool):
                out.append((name, "true" if value else "false"))
            else:
                out.append((name, str(value)))
        return out

    def url(self, **changes: Any) -> str:
        """The link to this view (with `changes`), its page reset unless the change is one."""
        if "cursor" not in changes:
            changes["cursor"] = None
        encoded = urlencode(self.params(**changes))
        return f"/sessions?{encoded}" if encoded else "/sessions"

    def chart_url(self, chart: str) -> str:
        """The chart `chart` of the sessions this view's filters leave (search and page aside)."""
        encoded = urlencode(self.params(q=None, cursor=None, limit=PAGE_SIZE))
        return f"/charts/{chart}.svg" + (f"?{encoded}" if encoded else "")

    def active(self) -> list[tuple[str, str, str]]:
        """(parameter, value, the link without it) for each filter this view applies."""
        out = []
        for name, value in self.params(cursor=None, limit=PAGE_SIZE, sort="newest"):
            if name == "tag":
                rest = tuple(t for t in self.tag if t != value)
                out.append((name, value, self.url(tag=rest)))
            elif name == "reward":  # the name goes with its bounds (they imply one)
                out.append((name, value, self.url(reward=None, reward_min=None, reward_max=None)))
            elif name == "score":  # the bounds need the name
                out.append((name, value, self.url(score=None, score_min=None, score_max=None)))
            else:
                out.append((name, value, self.url(**{name: None})))
        return out


def _day_ms(day: dt.date) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1000)


def query_of(mapping: Mapping[str, str] | Iterable[tuple[str, str]]) -> ListQuery:
    """`ListQuery.parse` over a mapping or pairs (aiohttp's `request.query` is a multidict)."""
    pairs = mapping.items() if isinstance(mapping, Mapping) else mapping
    return ListQuery.parse(pairs)


__all__ = ["PAGE_SIZE", "TAG_PARAMETERS", "BadQuery", "ListQuery", "query_of"]

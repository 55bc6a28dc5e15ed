"""The sessions list's URL: every filter read from its parameter into the read model's filter,
written back in one order (the same view has the same address), and a bad parameter named."""

from __future__ import annotations

import datetime as dt

import pytest

from rolltape.infra.console import BadQuery, ListQuery
from rolltape.infra.index import SessionFilter


def test_each_parameter_becomes_the_filter_it_names() -> None:
    query = ListQuery.parse(
        [
            ("task", "count apples"),
            ("env", "shop"),
            ("batch", "b1"),
            ("cron_job", "nightly"),
            ("tag", "split=test"),
            ("outcome", "rejected"),
            ("judge_version", "v2"),
            ("reward_min", "0.5"),
            ("tool", "shell"),
            ("tool_failed", "true"),
            ("erased", "false"),
            ("reviewed", "false"),
            ("disagreeing", "true"),
            ("since", "2026-12-01"),
            ("status", "completed"),
            ("group", "g1"),
        ]
    )
    where = query.where()
    assert where == SessionFilter(
        task="count apples",
        tags=("split=test", "env=shop", "batch=b1", "cron.job=nightly"),
        accepted=False,
        judge_version="v2",
        reward="reward",
        reward_min=0.5,
        tool="shell",
        tool_failed=True,
        erased=False,
        reviewed=False,
        disagreeing=True,
        since_ms=int(dt.datetime(2026, 12, 1, tzinfo=dt.UTC).timestamp() * 1000),
        status="completed",
        group_id="g1",
    )


def test_a_view_written_back_reads_as_the_same_view_and_empty_values_are_no_filter() -> None:
    query = ListQuery.parse(
        [("q", "pelican"), ("kind", "agent"), ("model", ""), ("tag", "a=1"), ("tag", "b")]
    )
    assert query.model == None and query.tag == ("a=1", "b")  # noqa: E711
    assert ListQuery.parse(query.params()) == query
    assert query.url() == "/sessions?q=pelican&kind=agent&tag=a%3D1&tag=b"
    assert query.url(kind=None) == "/sessions?q=pelican&tag=a%3D1&tag=b"


def test_a_filters_removal_link_keeps_every_other_filter_and_restarts_the_page() -> None:
    query = ListQuery.parse([("status", "failed"), ("tag", "a"), ("tag", "b"), ("cursor", "xyz")])
    links = {(name, value): link for name, value, link in query.active()}
    assert links == {
        ("status", "failed"): "/sessions?tag=a&tag=b",
        ("tag", "a"): "/sessions?status=failed&tag=b",
        ("tag", "b"): "/sessions?status=failed&tag=a",
    }
    assert query.url(cursor="next") == "/sessions?status=failed&tag=a&tag=b&cursor=next"


def test_the_order_is_part_of_the_view_but_no_filter_chip() -> None:
    query = ListQuery.parse([("sort", "reward_high"), ("status", "failed")])
    assert query.sort == "reward_high"
    assert query.url() == "/sessions?status=failed&sort=reward_high"
    assert [name for name, _, _ in query.active()] == ["status"]
    assert query.active()[0][2] == "/sessions?sort=reward_high"
    with pytest.raises(BadQuery, match="sort"):
        ListQuery.parse([("sort", "sideways")])


def test_bounds_of_a_reward_imply_its_name_and_leave_with_it() -> None:
    query = ListQuery.parse([("reward_min", "0.5"), ("kind", "agent")])
    assert query.where().reward == "reward"
    links = {name: link for name, _, link in query.active()}
    assert links["reward"] == "/sessions?kind=agent"
    assert ListQuery.parse([("reward", "pass"), ("reward_max", "1")]).where().reward == "pass"


@pytest.mark.parametrize(
    ("pairs", "says"),
    [
        ([("colour", "red")], "'colour' is not a filter"),
        ([("status", "done")], "'status'"),
        ([("reward_min", "lots")], "'reward_min'"),
        ([("since", "yesterday")], "'since'"),
        ([("limit", "0")], "'limit' is 1 to"),
    ],
)
def test_a_parameter_that_cannot_be_read_is_named(pairs: list[tuple[str, str]], says: str) -> None:
    with pytest.raises(BadQuery, match=says):
        ListQuery.parse(pairs)

"""`rolltape sessions list | show | search | sql`: questions to the read model.

Each opens the store the settings name (read only in effect: the queries never write) and
answers from it alone, with no broker: what the store holds is as fresh as its indexer
(`rolltape index status` says how far behind the log it is).
"""

from __future__ import annotations

from typing import cast

from rolltape.infra.index import SORTS, Page, QueryError, SearchHit, Sort, SqlResult, reading_store
from rolltape.infra.index import SessionDetail as SessionDetail
from rolltape.infra.index import SessionFilter as SessionFilter
from rolltape.infra.settings import Settings

SQL_TIMEOUT_S = 10.0
"""How long `rolltape sessions sql` lets a query run."""


def list_sessions(
    settings: Settings,
    where: SessionFilter,
    *,
    limit: int = 50,
    cursor: str | None = None,
    sort: str = "newest",
) -> Page:
    """A page of the sessions `where` leaves, in the order `sort` (QueryError names the
    orders there are)."""
    if sort not in SORTS:
        raise QueryError(f"--sort takes {', '.join(SORTS)}, not {sort!r}")
    with reading_store(settings) as store:
        return store.list_sessions(where, limit=limit, cursor=cursor, sort=cast(Sort, sort))


def show_session(settings: Settings, session_id: str) -> SessionDetail | None:
    with reading_store(settings) as store:
        return store.session(session_id)


def search_sessions(
    settings: Settings, text: str, where: SessionFilter, *, limit: int = 50
) -> list[SearchHit]:
    with reading_store(settings) as store:
        return store.search(text, where, limit=limit)


def run_sql(
    settings: Settings, query: str, *, max_rows: int = 1000, timeout_s: float = SQL_TIMEOUT_S
) -> SqlResult:
    with reading_store(settings) as store:
        return store.sql(query, max_rows=max_rows, timeout_s=timeout_s)

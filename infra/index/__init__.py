"""rolltape.infra.index: the read model, a projection of the log into a store built for queries.

`open_store` opens the store the settings name (SQLite by default, PostgreSQL for many hosts);
`IndexStore` is its port: the indexer's writes (rows and positions in one transaction) and the
typed queries (`list_sessions`, `session`, `search`, `sql`). `Indexer` is the service that keeps
it up to date (`rolltape serve index`). docs/read-model.md documents the schema.
"""

from __future__ import annotations

from pathlib import Path

from rolltape.infra.index._compare import VersionChange, VersionComparison
from rolltape.infra.index._facets import DayOutcomes, RewardBin, ToolFailures
from rolltape.infra.index._indexer import INDEXED_STREAMS, Indexer, IndexProgress
from rolltape.infra.index._located import (
    IndexBlobLocator,
    IndexHeadLocator,
    existing_store,
    locate_holding,
    locate_sessions,
    reading_store,
    scan_line,
    store_url,
    tail_line,
    unindexed,
)
from rolltape.infra.index._queries import (
    SORTS,
    ChainInfo,
    CheckpointInfo,
    DecisionInfo,
    FilterInfo,
    Page,
    PositionInfo,
    QueryError,
    RuleFiring,
    SearchHit,
    SessionDetail,
    SessionFilter,
    SessionSummary,
    Sort,
    SqlResult,
    StoreInfo,
    ToolCallInfo,
    VerdictInfo,
    WorldInfo,
)
from rolltape.infra.index._review import FILTER_JUDGE, JudgeAgreement
from rolltape.infra.index._schema import SCHEMA_VERSION, TABLE_NAMES
from rolltape.infra.index._store import (
    PAGE_MAX,
    IndexStore,
    PositionConflictError,
    StoreVersionError,
)


def open_store(url: str, *, prefix: str, create: bool = True) -> IndexStore:
    """The store at `url`, its schema made where there is none (`create`), checked against this
    version and topic prefix (StoreVersionError)."""
    store: IndexStore
    if url.startswith(("postgresql://", "postgres://")):
        from rolltape.infra.index._postgres import PostgresStore

        store = PostgresStore(url)
    elif url.startswith("sqlite:"):
        from rolltape.infra.index._sqlite import SQLiteStore

        store = SQLiteStore(Path(url.removeprefix("sqlite:")).expanduser())
    else:
        raise QueryError(
            f"the read model's address {url!r} is neither sqlite:PATH nor postgresql://...: "
            "fix ROLLTAPE_INDEX_URL"
        )
    if create:
        try:
            store.create(prefix)
        except BaseException:
            store.close()
            raise
    return store


__all__ = [
    "FILTER_JUDGE",
    "INDEXED_STREAMS",
    "PAGE_MAX",
    "SCHEMA_VERSION",
    "SORTS",
    "TABLE_NAMES",
    "ChainInfo",
    "CheckpointInfo",
    "DayOutcomes",
    "DecisionInfo",
    "FilterInfo",
    "IndexBlobLocator",
    "IndexHeadLocator",
    "IndexProgress",
    "IndexStore",
    "Indexer",
    "JudgeAgreement",
    "Page",
    "PositionConflictError",
    "PositionInfo",
    "QueryError",
    "RewardBin",
    "RuleFiring",
    "SearchHit",
    "SessionDetail",
    "SessionFilter",
    "SessionSummary",
    "Sort",
    "SqlResult",
    "StoreInfo",
    "StoreVersionError",
    "ToolCallInfo",
    "ToolFailures",
    "VerdictInfo",
    "VersionChange",
    "VersionComparison",
    "WorldInfo",
    "existing_store",
    "locate_holding",
    "locate_sessions",
    "open_store",
    "reading_store",
    "scan_line",
    "store_url",
    "tail_line",
    "unindexed",
]

"""The garbage collector's settings for rolltape's own processes: every `rolltape` command,
the worker among them, and the processes of `replay --jobs`. Never applied by the SDK: a
program that embeds the recorder keeps its own collector settings.

Why: CPython collects its youngest generation after every 700 net allocations of container
objects, and every tenth of those collections the next one, and so on to full collections.
rolltape's readers hold a session's decoded events at a time (each a tuple, the decoded dicts
and lists, a payload model), which crosses 700 within one session: an export ran one young
collection per session, and its full collections traversed every object the imports had created
(pydantic's schemas, faust, aiokafka). Measured on a 200,000-event export: while it folded and
wrote, 1,767 young and 15 full collections, 0.55 s of the 3.3 s that step took. Two settings
remove that cost:

- `gc.freeze()` at start-up, once the CLI's modules are imported, moves everything they created
  to the permanent generation, which no collection traverses (those objects live as long as the
  process anyway; what a command imports later is left to the collector);
- a young threshold of 10,000 lets a session's worth of events be allocated and freed between
  collections (the records of a batch, a session's events), which still runs the collector
  often enough for cycles to be freed within a fraction of a second of work.

The OTLP receiver (`otlp serve`, each of its workers) takes a higher young threshold,
`RECEIVER_YOUNG_THRESHOLD`: one request of 512 spans allocates some 30,000 container objects
while it is mapped and recorded (decoded attribute maps, parsed messages, the events' payloads),
so at 10,000 the young collections ran inside every request and traversed what the request still
held. Measured with `rolltape bench otlp` (30,000 spans, receiver CPU per run): the default
collector 3.8-4.1 s, these settings at 10,000 3.2 s, at 100,000 2.9 s.

Nothing rolltape does relies on cycles being freed promptly: its objects form few cycles.
"""

from __future__ import annotations

import gc
from typing import Final

YOUNG_THRESHOLD: Final = 10_000
RECEIVER_YOUNG_THRESHOLD: Final = 100_000


def tune_collector(young: int = YOUNG_THRESHOLD) -> None:
    """Apply the settings above to this process (idempotent): freeze what exists now, collect
    the young generation after `young` net allocations."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(young, older, oldest)

"""Run as a separate process by the tests: record N sessions concurrently from threads.

The cluster, credentials and topic prefix come from ROLLTAPE_* variables; one recorder writes
events and metrics, so it records as the admin (test_trust pins what each principal may write).
"""

from __future__ import annotations

import sys
import threading

from rolltape.infra import Settings, open_recorder
from rolltape.infra.bench._synthetic import end_synthetic_metrics, synthetic_metric
from rolltape.schemas import Role


def main(spool: str, tag: str, sessions: int, events: int) -> None:
    recorder = open_recorder(Settings(), role=Role.ADMIN, spool_dir=spool)

    def agent(i: int) -> None:
        with recorder.session(f"task {i}", session_id=f"{tag}-{i}") as s:
            for n in range(events):
                if n % 3 == 2:
                    s.tool_result(s.tool_call("lookup", {"n": n}), f"result {n}")
                else:
                    s.turn("assistant", f"{tag} session {i} event {n}")
                synthetic_metric(recorder, s, n, train_loss=1.0 / (n + 1))
            end_synthetic_metrics(recorder, s)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recorder.flush(120)
    recorder.close(60)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))

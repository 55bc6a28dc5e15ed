"""Run as a separate process by the tests: record N sessions concurrently from threads."""

from __future__ import annotations

import sys
import threading

from rolltape.producers import Recorder
from rolltape.producers._synthetic import end_synthetic_metrics, synthetic_metric


def main(bootstrap: str, prefix: str, spool: str, tag: str, sessions: int, events: int) -> None:
    recorder = Recorder(bootstrap, topic_prefix=prefix, spool_dir=spool)

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
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))

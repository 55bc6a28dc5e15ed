"""Run as a separate process by the outage test: an agent that records one session steadily,
says on stdout when a third is recorded (the test then kills the broker), and exits when done.
Its stderr is what an agent's author would see during the outage."""

from __future__ import annotations

import sys
import time

from rolltape.infra import Settings, open_recorder


def main(spool: str, session_id: str, total: int) -> None:
    recorder = open_recorder(Settings(), spool_dir=spool, spool_after_s=1.0)
    with recorder.session("survive a crash", session_id=session_id) as s:
        for n in range(total):
            s.turn("assistant", f"event {n}")
            if n == total // 3:
                print("a third recorded", flush=True)
            time.sleep(0.004)
    result = recorder.close(120)
    print(f"sealed {result.sealed} spooled {result.spooled}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))

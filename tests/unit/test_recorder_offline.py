"""The recorder without a broker: nothing blocks, nothing is lost, bad events are named."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rolltape.producers import EventsRejectedError, Recorder, RecorderClosedError
from rolltape.schemas import ChainVerifier
from tests.support.spool import drain
from tests.support.waiting import wait_until


def test_recorder__without_a_broker_spools_every_event_as_a_verifiable_chain(
    tmp_path: Path,
) -> None:
    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
    with recorder.session("offline task", session_id="offline-1") as s:
        s.turn("user", "hello")
        cid = s.tool_call("search", {"q": "x"})
        s.tool_result(cid, "nothing found", success=False, error="empty")
    result = recorder.flush(10)
    assert result.spooled == 5 and result.acked == 0 and result.mode == "spool"
    recorder.close(5)
    verifier = ChainVerifier()
    for value in drain(tmp_path):
        verifier.add(value)
    (report,) = verifier.reports()
    assert report.ok and report.ended and report.records == 5


def test_recorder__an_invalid_event_is_rejected_by_name_and_the_chain_skips_no_seq(
    tmp_path: Path,
) -> None:
    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
    s = recorder.session("task", session_id="bad-1")
    s.turn("robot", "hi")  # type: ignore[arg-type]  # not a role
    s.decision(epoch="very late")
    s.turn("user", "fine")
    with pytest.raises(EventsRejectedError) as info:
        recorder.flush(10)
    assert [r.type for r in info.value.rejected] == ["turn", "decision"]
    assert "role" in str(info.value) and info.value.path is not None and info.value.path.exists()
    s.end()
    recorder.close(5)
    verifier = ChainVerifier()
    for value in drain(tmp_path):
        verifier.add(value)
    assert all(r.ok for r in verifier.reports())


def test_session__records_nothing_after_it_ended(tmp_path: Path) -> None:
    recorder = Recorder(None, spool_dir=tmp_path)
    s = recorder.session("task")
    s.end("interrupted")
    with pytest.raises(RecorderClosedError):
        s.turn("user", "too late")
    recorder.close(5)
    with pytest.raises(RecorderClosedError):
        recorder.session("again")


def test_session__as_a_context_manager_ends_failed_with_the_error(tmp_path: Path) -> None:
    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
    with pytest.raises(ZeroDivisionError), recorder.session("task", session_id="boom-1"):
        _ = 1 / 0
    recorder.close(5)
    from rolltape.schemas import read_event

    last = read_event(drain(tmp_path)[-1])
    assert last.type == "session_ended"
    assert last.payload["status"] == "failed" and "ZeroDivisionError" in last.payload["error"]


def test_recorder__async_code_records_and_flushes_without_blocking_the_loop(tmp_path: Path) -> None:
    async def agent() -> int:
        recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
        async with recorder.session("async task", session_id="async-1") as s:
            for i in range(100):
                s.turn("assistant", f"step {i}")
        result = await recorder.aflush(10)
        await recorder.aclose(5)
        return result.spooled

    assert asyncio.run(agent()) == 102


def test_recorder__a_full_spool_refuses_new_events_and_keeps_the_accepted_ones(
    tmp_path: Path,
) -> None:
    from rolltape.producers import SpoolFullError

    recorder = Recorder(None, spool_dir=tmp_path, spool_max_bytes=8192, spool_after_s=0.0)
    s = recorder.session("fill the spool", session_id="full-1")
    accepted = 1

    def record() -> SpoolFullError | None:
        """One more event: the refusal once the spool is full, None while it takes them."""
        nonlocal accepted
        try:
            s.turn("assistant", "x" * 1000)
        except SpoolFullError as exc:
            return exc
        accepted += 1
        return None

    full = wait_until(record, what="the spool to fill and refuse an event", every_s=0.001)
    assert "ROLLTAPE_SPOOL_MAX_BYTES" in str(full)
    with pytest.raises(SpoolFullError):
        recorder.flush(10)
    recorder.close(2)
    verifier = ChainVerifier()
    for value in drain(tmp_path):
        verifier.add(value)
    (report,) = verifier.reports()
    assert report.ok and report.records == accepted


# Python >= 3.12 warns that fork() with threads may deadlock; the child here only touches the
# recorder's own flags, which is exactly what the test is about.
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_recorder__refuses_to_record_in_a_forked_child_and_says_why(tmp_path: Path) -> None:
    import os

    recorder = Recorder(None, spool_dir=tmp_path)
    session = recorder.session("parent work")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports what recording gave it, then leaves without cleanup
        try:
            session.turn("user", "from the child")
            message = b"recorded"
        except RecorderClosedError as exc:
            message = str(exc).encode()
        os.write(write, message)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(pid, 0)
    assert "forked child" in message and "create a new Recorder in the child" in message
    session.turn("user", "the parent still records")
    assert recorder.close(5).sealed == 2


def test_close__with_the_broker_unreachable_spools_every_event_in_order(tmp_path: Path) -> None:
    # The broker never answers and the stall timer never fires: close() must still leave every
    # event on disk, including those held back by backpressure, in chain order.
    recorder = Recorder("127.0.0.1:1", spool_dir=tmp_path, spool_after_s=3600)
    recorder._sender.config.outbox_limit = 10  # force the backpressure path: most events are
    recorder._sender.config.chain_batch = 5  # still queued, unsealed, when close() gives up
    with recorder.session("unreachable", session_id="unreach-1") as s:
        for n in range(300):
            s.turn("assistant", f"step {n}")
    result = recorder.close(1)
    assert result.acked == 0 and result.spooled == 302
    verifier = ChainVerifier()
    for value in drain(tmp_path):
        verifier.add(value)
    (report,) = verifier.reports()
    assert report.ok and report.records == 302 and report.ended


def test_session__records_arguments_as_they_were_at_the_call(tmp_path: Path) -> None:
    from rolltape.schemas import read_event

    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
    s = recorder.session("mutation", session_id="mutate-1")
    args = {"q": "first"}
    params = {"lr_new": 0.1, "edit_op": "none", "edit_to": "none"}
    tokens = [1, 2, 3]
    s.tool_call("search", args, call_id="c1")
    s.decision(
        epoch=1,
        event_type="hyperparameter_change",
        cites=["R1"],
        justification="lr",
        remedy_direction="decrease_lr",
        remedy_params=params,
    )
    s.turn("assistant", "x", token_ids=tokens)
    args["q"], params["lr_new"], tokens[0] = "changed", 99.0, 99  # the caller reuses its objects
    s.end()
    recorder.close(5)
    payloads = {e.type: e.payload for e in map(read_event, drain(tmp_path))}
    assert payloads["tool_call"]["arguments"] == {"q": "first"}
    assert payloads["decision"]["remedy_params"]["lr_new"] == 0.1
    assert payloads["turn"]["token_ids"] == [1, 2, 3]


def _idle(recorder: Recorder) -> None:
    wait_until(lambda: recorder._sender.idle, what="the sender to go idle", every_s=0.01)


@pytest.mark.parametrize("senders", [1, 2])
def test_recorder__record_calls_in_a_batch_window_wake_the_sender_once(
    tmp_path: Path, senders: int
) -> None:
    import time

    # The first record after a quiet spell wakes the sender; the caller's burst that follows
    # gathers in the window without one wake more (each would take the caller's interpreter).
    recorder = Recorder(
        None, spool_dir=tmp_path, spool_after_s=0.0, senders=senders, batch_window_s=0.05
    )
    wakes = []
    wake = recorder._sender.wake
    recorder._sender.wake = lambda: (wakes.append(1), wake())[1]  # type: ignore[method-assign]
    _idle(recorder)
    recorder._sender.config.batch_window_s = 60.0
    with recorder.session("burst", session_id="burst-1") as s:
        for n in range(20):
            s.turn("assistant", f"step {n}")
            time.sleep(0.005)  # the caller waits on I/O: a sender without a window gets to run
    assert len(wakes) == 1
    assert recorder.flush(30).spooled == 22  # a flush does not wait for the window
    assert recorder.close(30).spooled == 22

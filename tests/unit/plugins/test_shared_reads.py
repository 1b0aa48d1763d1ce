"""The DLQ view's shared reads (issue #44, point 3): one read per question, answers kept a while, reads bounded.

Pure asyncio, no broker: ``read`` here is a coroutine the test controls, so which request
read and which joined is known exactly; the time the answers are kept runs on a fake clock.
The routes that use this, against the real broker, are tested in
``tests/integration/test_dead_letter_view_load.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from airflow_kerr.plugins.shared_reads import Busy, SharedReads


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def until(condition: object) -> None:
    """Let the loop run until ``condition()`` holds (each step lets every ready task go on)."""
    for _ in range(10_000):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def test_ten_people_asking_the_same_question_get_one_reads_answer() -> None:
    shared = SharedReads()
    release = asyncio.Event()
    reads = 0

    async def read() -> tuple[bytes, bool]:
        nonlocal reads
        reads += 1
        await release.wait()
        return b'{"n":1}', True

    asking = [asyncio.ensure_future(shared.answer("q", 5.0, 4, 10.0, read)) for _ in range(10)]
    await until(lambda: shared.stats.joined == 9)
    release.set()
    answers = await asyncio.gather(*asking)
    assert answers == [b'{"n":1}'] * 10
    assert reads == 1 and shared.stats.reads == 1


async def test_an_answer_is_kept_for_its_ttl_then_read_again() -> None:
    clock = Clock()
    shared = SharedReads(clock=clock)
    bodies = iter([b"first", b"second"])

    async def read() -> tuple[bytes, bool]:
        return next(bodies), True

    assert await shared.answer("q", 5.0, 4, 10.0, read) == b"first"
    clock.now += 4.9
    assert await shared.answer("q", 5.0, 4, 10.0, read) == b"first"
    clock.now += 0.2
    assert await shared.answer("q", 5.0, 4, 10.0, read) == b"second"
    assert shared.stats.kept == 1 and shared.stats.reads == 2


async def test_an_error_reaches_everyone_waiting_and_is_not_kept() -> None:
    shared = SharedReads()
    release = asyncio.Event()
    outcomes = iter([ValueError("broker down"), None])

    async def read() -> tuple[bytes, bool]:
        await release.wait()
        error = next(outcomes)
        if error is not None:
            raise error
        return b"ok", True

    asking = [asyncio.ensure_future(shared.answer("q", 5.0, 4, 10.0, read)) for _ in range(3)]
    await until(lambda: shared.stats.joined == 2)
    release.set()
    results = await asyncio.gather(*asking, return_exceptions=True)
    assert [str(r) for r in results] == ["broker down"] * 3
    assert await shared.answer("q", 5.0, 4, 10.0, read) == b"ok"


async def test_beyond_the_slots_a_question_waits_then_is_refused_with_a_retry_after() -> None:
    shared = SharedReads()

    async def read() -> tuple[bytes, bool]:
        return b"ok", True

    async with shared.slot(1, 0.0):
        with pytest.raises(Busy) as refused:
            await shared.answer("other", 5.0, 1, 0.0, read)
        assert refused.value.retry_after_s == 2 and "ask again in 2 s" in str(refused.value)
        waiting = asyncio.ensure_future(shared.answer("queued", 5.0, 1, 60.0, read))
        await until(lambda: shared.waiting("queued"))
        assert not waiting.done()
    assert await waiting == b"ok"  # the slot freed: the queued question was read
    assert shared.stats.busy == 1 and shared.active == 0


async def test_a_person_leaving_does_not_cancel_the_read_others_wait_for() -> None:
    shared = SharedReads()
    release = asyncio.Event()

    async def read() -> tuple[bytes, bool]:
        await release.wait()
        return b"ok", True

    leaving = asyncio.ensure_future(shared.answer("q", 5.0, 4, 10.0, read))
    staying = asyncio.ensure_future(shared.answer("q", 5.0, 4, 10.0, read))
    await until(lambda: shared.stats.joined == 1)
    leaving.cancel()
    release.set()
    assert await staying == b"ok"
    assert leaving.cancelled()


async def test_at_most_max_kept_answers_are_kept() -> None:
    shared = SharedReads(max_kept=2)

    async def read() -> tuple[bytes, bool]:
        return b"x", True

    for key in ("a", "b", "c"):
        await shared.answer(key, 60.0, 4, 10.0, read)
    await shared.answer("a", 60.0, 4, 10.0, read)  # pushed out by "c": read again
    assert shared.stats.reads == 4 and shared.stats.kept == 0


async def test_an_answer_its_read_says_not_to_keep_is_read_again() -> None:
    """A summary chunk that read nothing hands back its own cursor: kept, that cursor would answer itself."""
    shared = SharedReads()
    bodies = iter([(b"no progress", False), (b"progress", True)])

    async def read() -> tuple[bytes, bool]:
        return next(bodies)

    assert await shared.answer("q", 60.0, 4, 10.0, read) == b"no progress"
    assert await shared.answer("q", 60.0, 4, 10.0, read) == b"progress"
    assert await shared.answer("q", 60.0, 4, 10.0, read) == b"progress"
    assert shared.stats.reads == 2 and shared.stats.kept == 1

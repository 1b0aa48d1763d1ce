"""One batch's transaction written in a worker thread while the loop reads and decides the next.

Apart from :mod:`airflow_kerr.replay.transactions` because it is a different job: that
module decides what each client error means for one transaction; this one only decides
when a transaction runs (one in flight, never more).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from airflow_kerr.replay.policy import Outgoing
from airflow_kerr.replay.transactions import TransactionalWriter


class BackgroundWriter:
    """Writes one batch at a time in a worker thread, so the caller reads and decides the next meanwhile.

    A transaction ends in round trips (flush, ``send_offsets_to_transaction``, commit) that
    leave a single-threaded replay idle; with one batch in flight they overlap the next
    batch's parsing. Never more than one: transactions commit in batch order, and an abort
    is known before the next batch is handed over, so the caller can rewind and discard it.
    """

    def __init__(self, writer: TransactionalWriter) -> None:
        self.writer = writer
        self._executor: ThreadPoolExecutor | None = None
        self._future: Future[bool] | None = None

    @property
    def busy(self) -> bool:
        """Whether a batch was handed over and its outcome not yet collected with :meth:`result`."""
        return self._future is not None

    @property
    def finished(self) -> bool:
        """Whether the batch in flight has its outcome ready: :meth:`result` returns at once."""
        return self._future is not None and self._future.done()

    def submit(
        self,
        records: Sequence[Outgoing],
        offsets: Sequence[Any],
        group_metadata: Any,
        pace: Callable[[], bool] | None = None,
        halted: Callable[[], bool] | None = None,
    ) -> None:
        """Start :meth:`TransactionalWriter.write` of one batch; collect its outcome with :meth:`result` first."""
        if self._future is not None:
            raise RuntimeError("a batch is still in flight; collect its result first")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="kerr-replay-writer")
        self._future = self._executor.submit(self.writer.write, records, offsets, group_metadata, pace, halted)

    def result(self) -> bool:
        """Wait for the batch in flight: what ``write`` returned, or the exception it raised."""
        if self._future is None:
            raise RuntimeError("no batch is in flight")
        future, self._future = self._future, None
        return future.result()

    def close(self) -> None:
        """Wait for the batch in flight, if any, ignoring its outcome, and end the worker thread."""
        if self._future is not None:
            self._future.exception()
            self._future = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

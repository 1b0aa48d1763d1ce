"""How a failed task's cause reaches the driver's log: a text protocol between executor and driver.

Spark hands the driver only the text of a task's last exception, wrapped in its own
words and the worker's traceback. The task therefore writes what matters into that
text (:func:`task_failure_text`): each cause of the exception chain on a
``caused by`` line, and the first failed record's error context as JSON; the driver
picks those lines back out (:func:`failure_summary`) to log them. Imports nothing of
Spark's or Arrow's, so both sides load it.
"""

from __future__ import annotations

from airflow_kerr.errors import ErrorContext, describe_error

ERROR_CONTEXT_MARKER = "first failure error context: "
CAUSE_MARKER = "caused by "


def task_failure_text(error: BaseException, context: ErrorContext | None) -> str:
    """The failed task's message: the error, a ``caused by`` line per cause, and the error context when known."""
    detail = f"\n{ERROR_CONTEXT_MARKER}{context.to_json()}" if context is not None else ""
    causes = "".join(f"\n{CAUSE_MARKER}{describe_error(cause)}" for cause in _causes(error))
    return f"{type(error).__name__}: {error}{causes}{detail}"


def _causes(error: BaseException) -> list[BaseException]:
    """The exceptions behind ``error``, nearest first: Spark reports only the last one of a chain."""
    chain: list[BaseException] = []
    seen = {id(error)}
    current = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return chain


def failure_summary(text: str) -> list[str]:
    """The lines worth logging from a failed run's exception text: the headline, its causes, the error context.

    Spark wraps a task's failure in its own text with the worker's traceback; the headline
    is the first line naming an error, and the ``caused by`` lines carry what Spark drops
    from the exception chain (the Kafka error behind a failed DLQ write, say).
    """
    lines = text.splitlines()
    headline = next((line for line in lines if "Tolerance exceeded" in line or "Error" in line), text[:500])
    causes = [line for line in lines if line.startswith(CAUSE_MARKER)]
    context = [line[line.index(ERROR_CONTEXT_MARKER) :] for line in lines if ERROR_CONTEXT_MARKER in line][:1]
    return [headline, *causes, *context]

"""How a failed record's exception is written down: Java-like class and message, and the Python traceback.

Connect's DLQ headers carry the exception's class, its message and a stack trace
(``printStackTrace``); the error context's JSON carries the same trace. A job fails the
same way many times, so the traceback's frames are formatted once per shape and
cached. Pure Python: this module imports nothing else of ours.
"""

from __future__ import annotations

import linecache
import traceback
from dataclasses import dataclass
from types import CodeType, TracebackType
from typing import Final


def exception_class_name(error: BaseException) -> str:
    """The class name as Python's traceback prints it: ``ValueError``, ``json.decoder.JSONDecodeError``."""
    cls = type(error)
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def exception_message(error: BaseException) -> str | None:
    """The message, or ``None`` for an exception raised without one (Java's null ``getMessage()``)."""
    message = str(error)
    if not error.args and message == "":
        return None
    return message


def format_stacktrace(error: BaseException, *, class_name: str | None = None, message: str | None = None) -> str:
    """Render like Java's ``printStackTrace``: ``class: message`` first, then the Python traceback.

    Tools that show only the first line of Connect's stacktrace header still get the class
    and message; the full Python traceback (with chained causes) follows. A caller that
    already has :func:`exception_class_name` and :func:`exception_message` of ``error``
    passes both, so they are not worked out twice (a ``message`` without ``class_name`` is
    ignored).
    """
    if class_name is None:
        class_name, message = exception_class_name(error), exception_message(error)
    head = class_name if message is None else f"{class_name}: {message}"
    tb, cause, context = error.__traceback__, error.__cause__, error.__context__
    if tb is None and cause is None and context is None:
        return head
    if cause is None and (context is None or error.__suppress_context__):
        # Nothing chained to print: the frames, then the last line from what is known already.
        frames = "" if tb is None else _frames_text(tb)
        return f"{head}\n{frames}{_exception_only_text(error, class_name, message)}"
    return head + "\n" + "".join(_traceback_lines(error, set()))


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"


_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


_TRACEBACK_HEADER = "Traceback (most recent call last):\n"


#: Formatted frame blocks kept at most; past it the cache starts over (tracebacks of a job repeat a few shapes).
FRAMES_CACHE_SIZE: Final = 512


@dataclass(frozen=True, slots=True)
class _FramesText:
    """A formatted frame block and what it was made from, for :func:`_frames_text`'s cache.

    ``codes`` keeps the frames' code objects alive, so the ids in the cache key cannot be
    reused by other code objects while the entry exists. ``sources`` pairs each file read
    with the linecache entry its source lines came from.
    """

    text: str
    codes: tuple[CodeType, ...]
    sources: tuple[tuple[str, object], ...]

    def is_current(self) -> bool:
        """Whether linecache still holds the very entries the text was read from."""
        entries = linecache.cache
        for filename, entry in self.sources:  # noqa: SIM110 - a loop, as a generator costs more than the lookups
            if entries.get(filename) is not entry:
                return False
        return True


# Frame blocks by their frames' (code object id, instruction offset) pairs.
_frames_cache: dict[tuple[int, ...], _FramesText] = {}


def _traceback_lines(error: BaseException, seen: set[int]) -> list[str]:
    """The text of ``traceback.format_exception``, chained causes included, without the ``^^^`` markers.

    The standard formatter parses every frame's source line to place those markers,
    which made one failed record cost over 100 microseconds; a frame walk over
    linecache gives the same frames and source lines for a fraction of that, and the
    frames of a traceback seen before are not formatted again (:func:`_frames_text`).
    """
    seen.add(id(error))
    lines: list[str] = []
    cause, context = error.__cause__, error.__context__
    if cause is not None and id(cause) not in seen:
        lines += [*_traceback_lines(cause, seen), _CAUSE]
    elif context is not None and not error.__suppress_context__ and id(context) not in seen:
        lines += [*_traceback_lines(context, seen), _CONTEXT]
    if error.__traceback__ is not None:
        lines.append(_frames_text(error.__traceback__))
    try:
        message = exception_message(error)
    except Exception:
        lines += traceback.format_exception_only(type(error), error)
    else:
        lines.append(_exception_only_text(error, exception_class_name(error), message))
    return lines


def _frames_text(tb: TracebackType) -> str:
    """``Traceback (most recent call last):`` and the frames of ``tb`` with their source lines, as one text.

    A job fails the same way many times, so the text is cached by what it is made of: each
    frame's code object (its file and function) and instruction offset (its line), plus the
    source lines linecache holds. The key is cheap to build on purpose: code object ids, as
    a code object's hash walks its constants (the entry keeps the code objects alive, so
    their ids stay theirs), and offsets, as ``tb_lineno`` scans the line table. A hit is
    used only while linecache still holds the entries the text was read from, and a
    traceback through a file linecache has no source for is never cached (linecache may
    find it later).
    """
    key: list[int] = []
    frame_tb: TracebackType | None = tb
    while frame_tb is not None:
        key += (id(frame_tb.tb_frame.f_code), frame_tb.tb_lasti)
        frame_tb = frame_tb.tb_next
    frozen = tuple(key)
    cached = _frames_cache.get(frozen)
    if cached is not None and cached.is_current():
        return cached.text
    text = _format_frames(tb)
    codes = tuple(frame.f_code for frame, _ in traceback.walk_tb(tb))
    files = dict.fromkeys(code.co_filename for code in codes)
    sources = tuple((filename, linecache.cache.get(filename)) for filename in files)
    if all(entry is not None and len(entry) > 1 for _, entry in sources):
        if len(_frames_cache) >= FRAMES_CACHE_SIZE:
            _frames_cache.clear()
        _frames_cache[frozen] = _FramesText(text, codes, sources)
    return text


def _format_frames(tb: TracebackType) -> str:
    """The frame block of ``tb`` as ``traceback.format_exception`` writes it, less the ``^^^`` lines."""
    lines = [_TRACEBACK_HEADER]
    for frame, lineno in traceback.walk_tb(tb):
        code = frame.f_code
        lines.append(f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n')
        source = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
        if source:
            lines.append(f"    {source}\n")
    return "".join(lines)


def _exception_only_text(error: BaseException, class_name: str, message: str | None) -> str:
    """``traceback.format_exception_only(type(error), error)`` joined, written directly in the common case.

    ``class_name`` and ``message`` are :func:`exception_class_name` and
    :func:`exception_message` of ``error``. The standard function builds a
    ``TracebackException`` (walking the exception's chain) only to print ``class: message``;
    exceptions that print more than that line (a ``SyntaxError``, one with ``__notes__``)
    or whose class has a module that is not a string still go through it.
    """
    cls = type(error)
    if issubclass(cls, SyntaxError) or not isinstance(cls.__module__, str) or hasattr(error, "__notes__"):
        return "".join(traceback.format_exception_only(cls, error))
    return f"{class_name}: {message}\n" if message else f"{class_name}\n"

"""Where a chunked summary goes on: the opaque, URL-safe cursor the page sends back, and the timeline's bucket width.

A cursor is read back from a request, so every part of it is checked: a cursor from another
topic or selection, or not from here, is refused with :class:`InvalidSelection` naming
``cursor`` rather than counted wrongly.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass

from airflow_kerr.errors.config import LONG_MAX, ConfigProblem
from airflow_kerr.errors.dead_letter import shown
from airflow_kerr.inspection.selection import InvalidSelection, Selection

#: Timeline bucket widths the summary chooses from (milliseconds): round figures a person reads at a glance.
BUCKET_WIDTHS_MS = (
    1_000,
    10_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
    21_600_000,
    86_400_000,
    7 * 86_400_000,
    30 * 86_400_000,
)
#: The summary picks the narrowest width that gives at most this many buckets.
MAX_BUCKETS = 60
#: A cursor longer than this is not one the summary wrote (a few dozen bytes per partition).
MAX_CURSOR_CHARS = 200_000
_CURSOR_VERSION = 1


def choose_bucket_ms(oldest_ms: int | None, newest_ms: int | None) -> int:
    """The narrowest width of :data:`BUCKET_WIDTHS_MS` that spans ``oldest..newest`` in at most 60 buckets."""
    if oldest_ms is None or newest_ms is None or newest_ms <= oldest_ms:
        return BUCKET_WIDTHS_MS[0]
    for width in BUCKET_WIDTHS_MS:
        if newest_ms // width - oldest_ms // width + 1 <= MAX_BUCKETS:
            return width
    return BUCKET_WIDTHS_MS[-1]


@dataclass(frozen=True)
class ScanCursor:
    """Where a chunked summary goes on: per partition the next offset and the fixed end, and the scan's constants."""

    topic: str
    selection: str
    bucket_ms: int
    oldest_ms: int | None
    newest_ms: int | None
    total: int
    position: int
    partitions: Mapping[int, tuple[int, int]]

    def encode(self) -> str:
        """Opaque and URL-safe: base64url (no padding) of compact JSON."""
        data = {
            "v": _CURSOR_VERSION,
            "t": self.topic,
            "s": self.selection,
            "b": self.bucket_ms,
            "o": self.oldest_ms,
            "n": self.newest_ms,
            "T": self.total,
            "P": self.position,
            "p": [[p, nxt, end] for p, (nxt, end) in sorted(self.partitions.items())],
        }
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(cls, text: str, topic: str, selection: Selection) -> ScanCursor:
        """Read a cursor back, checking every part; ``InvalidSelection`` naming ``cursor`` when it is not usable."""

        def bad(why: str) -> InvalidSelection:
            return InvalidSelection(
                [ConfigProblem("cursor", shown(text), f"{why}; expected the cursor of the previous chunk, or none")]
            )

        if not isinstance(text, str) or len(text) > MAX_CURSOR_CHARS or not text.isascii():
            raise bad("not a summary cursor")
        try:
            data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        except (binascii.Error, ValueError, RecursionError):
            raise bad("not a summary cursor") from None

        def integer(value: object) -> bool:
            return type(value) is int and 0 <= value <= LONG_MAX

        def stamp(value: object) -> bool:
            return value is None or integer(value)

        if not isinstance(data, dict) or data.get("v") != _CURSOR_VERSION:
            raise bad("not a summary cursor")
        rows = data.get("p")
        if (
            not isinstance(data.get("t"), str)
            or not isinstance(data.get("s"), str)
            or data.get("b") not in BUCKET_WIDTHS_MS
            or not stamp(data.get("o"))
            or not stamp(data.get("n"))
            or not integer(data.get("T"))
            or not integer(data.get("P"))
            or not isinstance(rows, list)
            or not all(
                isinstance(row, list)
                and len(row) == 3
                and all(integer(v) for v in row)
                and row[0] <= 2**31 - 1
                and row[1] <= row[2]
                for row in rows
            )
            or len({row[0] for row in rows}) != len(rows)
        ):
            raise bad("not a summary cursor")
        if data["t"] != topic:
            raise bad(f"made for topic {shown(data['t'])}, not {topic!r}")
        if data["s"] != selection.fingerprint():
            raise bad("made for another selection (start the count again when the selection changes)")
        return cls(
            topic=topic,
            selection=data["s"],
            bucket_ms=data["b"],
            oldest_ms=data["o"],
            newest_ms=data["n"],
            total=data["T"],
            position=data["P"],
            partitions={row[0]: (row[1], row[2]) for row in rows},
        )

"""Record timestamps for tests that write to a broker.

A dead letter keeps its source record's timestamp, and the broker's time retention
(7 days by default) deletes a record whose timestamp is older within a second or so.
A fixed stamp therefore turns into a failing test a week after it was written, so
broker tests stamp their records an hour before the session started.
"""

from __future__ import annotations

import time

#: An hour before the test session started, in epoch milliseconds.
RECENT_MS = int(time.time() * 1000) - 3_600_000

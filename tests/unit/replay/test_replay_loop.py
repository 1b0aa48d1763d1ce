"""What the replay loop changes in the interpreter while it runs, and that it puts it back."""

from __future__ import annotations

import sys

import pytest

from airflow_kerr.replay.tuning import SWITCH_INTERVAL_S, quick_thread_switches


def test_the_loop_switches_threads_quickly_and_restores_the_interval_even_when_it_fails() -> None:
    before = sys.getswitchinterval()
    with pytest.raises(RuntimeError), quick_thread_switches():
        assert sys.getswitchinterval() == pytest.approx(min(before, SWITCH_INTERVAL_S))
        raise RuntimeError("the loop failed")
    assert sys.getswitchinterval() == before

"""The phase recorder behind bench/bench_whatif.py: nested names, CPU and memory figures, and
nothing recorded (or costing anything) outside a recording."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from stragglers import phases
from stragglers.phases import phase


def test_nested_phases_are_named_by_path_and_summed():
    with phases.recording() as log:
        with phase("outer"):
            for _ in range(2):
                with phase("inner"):
                    sum(range(10_000))
        with phase("other"):
            pass
    names = [r.name for r in log.rows()]
    assert names == ["outer", "outer/inner", "other"]
    rec = log.records
    assert rec["outer/inner"].calls == 2 and rec["outer"].calls == 1
    assert rec["outer"].wall_s >= rec["outer/inner"].wall_s >= 0
    assert all(r.cpu_s >= 0 for r in log.rows())


def test_peak_memory_of_a_phase_covers_what_it_allocated():
    with phases.recording() as log:
        with phase("small"):
            pass
        with phase("big"):
            # 64 MiB of fresh pages, touched: an anonymous mapping, not the allocator, which
            # may hand back pages a test before this one left resident in the process
            m = mmap.mmap(-1, 64 * 2**20)
            a = np.frombuffer(m, dtype=np.uint8)
            a[::4096] = 1
            del a
            m.close()
    rec = log.records
    if log.peak_exact:  # the high-water mark could be reset: the big phase's own peak
        assert rec["big"].peak_mib >= rec["small"].peak_mib + 48
    assert rec["big"].peak_mib > 0


def test_nothing_is_recorded_outside_a_recording():
    with phase("ignored"):
        pass
    with phases.recording() as log:
        pass
    assert log.rows() == []
    with phases.recording(), pytest.raises(RuntimeError), phases.recording():
        pass

"""DeviceTimeline's chunked insertion search against the plain walk over every block (the specification).

The plain model below is the timeline as it was before the chunks: two flat sorted lists, a walk
from ``bisect_right(ends, ready)`` that takes the first gap with ``t + duration <= start``, and the
merging ``reserve``. The chunked timeline must give the same answers and the same blocks on every
sequence; ``CHUNK`` is shrunk in most tests so that short sequences cross many chunk boundaries,
splits, joins and dropped chunks.
"""

from __future__ import annotations

import random
from bisect import bisect_right

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphir.passes.place import common
from graphir.passes.place.common import DeviceTimeline


class PlainTimeline:
    """The specification: flat sorted, merged blocks; the insertion search walks them one by one."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def earliest_start(self, ready: float, duration: float) -> float:
        i = bisect_right(self.ends, ready)
        t = ready
        while i < len(self.starts):
            if t + duration <= self.starts[i]:
                return t
            t = max(t, self.ends[i])
            i += 1
        return t

    def reserve(self, start: float, end: float) -> None:
        if end <= start:
            return
        starts, ends = self.starts, self.ends
        i = bisect_right(starts, start)
        merge_prev = i > 0 and ends[i - 1] == start
        merge_next = i < len(starts) and starts[i] == end
        if merge_prev and merge_next:
            ends[i - 1] = ends[i]
            del starts[i], ends[i]
        elif merge_prev:
            ends[i - 1] = end
        elif merge_next:
            starts[i] = start
        else:
            starts.insert(i, start)
            ends.insert(i, end)


def check_structure(line: DeviceTimeline) -> None:
    """Chunks non-empty and within bounds (but a lone chunk), bounds and rooms equal to a recomputation."""
    count = len(line._starts)
    for c in range(count):
        starts, ends = line._starts[c], line._ends[c]
        assert 0 < len(starts) <= 2 * common.CHUNK and len(starts) == len(ends)
        assert line._first[c] == starts[0] and line._last[c] == ends[-1]
        inner = max((b - a for a, b in zip(ends[:-1], starts[1:], strict=True)), default=-1.0)
        assert line._inner[c] == inner
        room = max(inner, starts[0] - line._last[c - 1]) if c > 0 else inner
        assert line._room[c] == room
    flat_s, flat_e = line.starts, line.ends
    assert all(s < e for s, e in zip(flat_s, flat_e, strict=True))
    assert all(e < s for e, s in zip(flat_e, flat_s[1:], strict=False))  # disjoint and merged


def run_both(bookings: list[tuple[float, float]], queries: list[tuple[float, float]]) -> DeviceTimeline:
    """Book each (ready, length) where both timelines put it; then ask every query; all answers agree."""
    line, plain = DeviceTimeline(), PlainTimeline()
    for ready, length in bookings:
        start = line.earliest_start(ready, length)
        assert start == plain.earliest_start(ready, length)
        line.reserve(start, start + length)
        plain.reserve(start, start + length)
        assert (line.starts, line.ends) == (plain.starts, plain.ends)
    check_structure(line)
    for ready, length in queries:
        assert line.earliest_start(ready, length) == plain.earliest_start(ready, length), (ready, length)
    return line


def test_many_blocks_with_the_default_chunk() -> None:
    """3,000 blocks [2k, 2k + 1) booked out of order (odd k first), so chunks split many times. The
    gaps are all 1: a node of 1 ready at 0 starts at 1, a node of 1.5 after the last block, at 5999. A
    node of 1 ready at 2999.5, inside the gap [2999, 3000), does not fit the rest of it (3000.5 > 3000)
    and starts at the next gap, 3001; a node of 0.5 fits the rest exactly (3000 <= 3000)."""
    line = DeviceTimeline()
    for k in [*range(1, 3000, 2), *range(0, 3000, 2)]:
        line.reserve(2.0 * k, 2.0 * k + 1.0)
    check_structure(line)
    assert len(line._starts) > 20 and len(line.starts) == 3000
    assert line.earliest_start(0.0, 1.0) == 1.0
    assert line.earliest_start(0.0, 1.5) == 5999.0
    assert line.earliest_start(2999.5, 1.0) == 3001.0
    assert line.earliest_start(2999.5, 0.5) == 2999.5  # the partial gap holding `ready` counts from it
    assert line.available == 5999.0


def test_a_wide_gap_deep_inside_a_later_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """CHUNK = 2 (chunks of 1-4 blocks). Blocks [3k, 3k + 2) for k < 40 leave gaps of 1, except that
    block 30 is left out: the gap [89, 93) is 4 long. A node of 4 ready at 0 goes there (89: a gap of
    exactly the duration fits), a node of 4.5 after the last block (119), and once [89, 93) is booked
    (joining blocks 29 and 31 across a chunk boundary or not) a node of 4 goes to 119 too."""
    monkeypatch.setattr(common, "CHUNK", 2)
    line = DeviceTimeline()
    for k in range(40):
        if k != 30:
            line.reserve(3.0 * k, 3.0 * k + 2.0)
    check_structure(line)
    assert line.earliest_start(0.0, 4.0) == 89.0
    assert line.earliest_start(0.0, 4.5) == 119.0
    assert line.earliest_start(90.0, 2.0) == 90.0  # ready inside the wide gap
    assert line.earliest_start(90.0, 3.5) == 119.0  # ready inside it, too little left; the gaps after: 1
    line.reserve(89.0, 93.0)
    check_structure(line)
    assert line.earliest_start(0.0, 4.0) == 119.0
    assert len(line.starts) == 38


def test_merges_across_chunk_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    """CHUNK = 2. Twelve blocks [2k, 2k + 1), then every gap [2k + 1, 2k + 2) filled from the right:
    each booking joins two blocks, many of them the last of one chunk and the first of the next, until
    one block [0, 23) is left in one chunk. Then [23, 24) extends it and [25, 26) opens a new block."""
    monkeypatch.setattr(common, "CHUNK", 2)
    line, plain = DeviceTimeline(), PlainTimeline()
    for k in range(12):
        line.reserve(2.0 * k, 2.0 * k + 1.0)
        plain.reserve(2.0 * k, 2.0 * k + 1.0)
    assert len(line._starts) > 2
    for k in range(10, -1, -1):
        line.reserve(2.0 * k + 1.0, 2.0 * k + 2.0)
        plain.reserve(2.0 * k + 1.0, 2.0 * k + 2.0)
        check_structure(line)
        assert (line.starts, line.ends) == (plain.starts, plain.ends)
    assert (line.starts, line.ends) == ([0.0], [23.0]) and len(line._starts) == 1
    line.reserve(23.0, 24.0)
    line.reserve(25.0, 26.0)
    assert (line.starts, line.ends) == ([0.0, 25.0], [24.0, 26.0])
    assert line.earliest_start(0.0, 1.0) == 24.0 and line.earliest_start(0.0, 1.01) == 26.0


def test_the_next_block_opens_the_next_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """CHUNK = 2. Blocks [4k, 4k + 1) for k < 10. Booking [4k + 2, 4k + 4) touches only the block after
    it, which for some k is the first of the next chunk (its start moves back); booking [4k + 1, 4k + 2)
    then touches both."""
    monkeypatch.setattr(common, "CHUNK", 2)
    line, plain = DeviceTimeline(), PlainTimeline()
    for k in range(10):
        line.reserve(4.0 * k, 4.0 * k + 1.0)
        plain.reserve(4.0 * k, 4.0 * k + 1.0)
    for k in range(9):
        line.reserve(4.0 * k + 2.0, 4.0 * k + 4.0)
        plain.reserve(4.0 * k + 2.0, 4.0 * k + 4.0)
        check_structure(line)
        assert (line.starts, line.ends) == (plain.starts, plain.ends)
        assert line.earliest_start(0.0, 1.0) == plain.earliest_start(0.0, 1.0)
    for k in range(9):
        line.reserve(4.0 * k + 1.0, 4.0 * k + 2.0)
        check_structure(line)
    assert (line.starts, line.ends) == ([0.0], [37.0])


def test_a_gap_that_fits_only_by_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gap [a, b) with b = fl(a + d) exactly, so the walk's test a + d <= b holds, while the computed
    gap fl(b - a) is one ulp short of d (a = 1.3436424411240122, d = 0.8474337369372327: b - a =
    0.8474337369372325). A room filter comparing gaps with d would skip it; the chunked search must
    find it, also when it sits in a chunk after the first one searched."""
    a, d = 1.3436424411240122, 0.8474337369372327
    b = a + d
    assert b - a < d
    monkeypatch.setattr(common, "CHUNK", 2)
    line, plain = DeviceTimeline(), PlainTimeline()
    # 100 blocks of 0.6 with gaps of 0.4 (< d), the last ending 0.4 before [a - 0.5, a); then [b, b + 0.5)
    blocks = [(a - 0.5 - (k + 1.0), a - 0.5 - (k + 1.0) + 0.6) for k in range(100)]
    blocks += [(a - 0.5, a), (b, b + 0.5)]
    for begin, end in blocks:
        line.reserve(begin, end)
        plain.reserve(begin, end)
    check_structure(line)
    assert len(line._starts) > 10
    ready = blocks[99][0]  # the first block's start
    assert plain.earliest_start(ready, d) == a
    assert line.earliest_start(ready, d) == a
    assert line.earliest_start(ready, 0.8) == a  # wider than every 0.4 gap before it
    assert line.earliest_start(ready, 0.9) == plain.earliest_start(ready, 0.9) == b + 0.5


def test_zero_length_and_ties() -> None:
    """Zero-length bookings occupy nothing; a node of length 0 ready inside a block starts at the block's
    end (the walk's rule). Float ties: 0.1 + 0.2 > 0.3, so a node of 0.2 does not fit the gap [0.1, 0.3).
    Ready at infinity: infinity; an infinite node: after the last block."""
    line = DeviceTimeline()
    line.reserve(0.0, 0.1)
    line.reserve(0.3, 1.0)
    line.reserve(0.5, 0.5)
    assert (line.starts, line.ends) == ([0.0, 0.3], [0.1, 1.0])
    assert line.earliest_start(0.05, 0.0) == 0.1
    assert line.earliest_start(0.5, 0.0) == 1.0
    assert line.earliest_start(0.0, 0.2) == 1.0  # 0.1 + 0.2 = 0.30000000000000004 > 0.3
    assert line.earliest_start(0.0, 0.19) == 0.1
    assert line.earliest_start(float("inf"), 1.0) == float("inf")
    assert line.earliest_start(0.0, float("inf")) == 1.0


@pytest.mark.parametrize("chunk", [2, 3, 8, 64])
def test_seeded_dense_sequences(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """60 seeded sequences of 400 bookings (ready 0..300 in quarters, lengths 0..3 in quarters, some
    zero), each booked where the search puts it, then 50 queries: the chunked timeline agrees with the
    plain walk on every answer and every block."""
    monkeypatch.setattr(common, "CHUNK", chunk)
    rng = random.Random(chunk)
    for _ in range(60):
        bookings = [(rng.randint(0, 1200) / 4, rng.randint(0, 12) / 4) for _ in range(400)]
        queries = [(rng.randint(-4, 1600) / 4, rng.randint(0, 16) / 4) for _ in range(50)]
        run_both(bookings, queries)


def test_seeded_float_sequences(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arbitrary floats (ready uniform in [0, 50), lengths in [0, 1)): ties decided by rounding."""
    monkeypatch.setattr(common, "CHUNK", 2)
    rng = random.Random(7)
    for _ in range(40):
        bookings = [(rng.uniform(0, 50), rng.uniform(0, 1)) for _ in range(300)]
        queries = [(rng.uniform(0, 60), rng.uniform(0, 1.5)) for _ in range(50)]
        run_both(bookings, queries)


times = st.integers(min_value=0, max_value=60).map(lambda k: k / 4)


@settings(max_examples=200, deadline=None)
@given(
    chunk=st.integers(min_value=2, max_value=5),
    bookings=st.lists(st.tuples(times, times), max_size=150),
    direct=st.lists(st.tuples(times, times), max_size=30),
    queries=st.lists(st.tuples(times, times), max_size=20),
)
def test_property_matches_the_plain_walk(
    chunk: int,
    bookings: list[tuple[float, float]],
    direct: list[tuple[float, float]],
    queries: list[tuple[float, float]],
) -> None:
    """Bookings where the search puts them, then direct bookings of (start, length) where they are idle
    in the plain model (the placers only book found slots, but reserve must merge any idle slot), then
    queries: the same blocks and answers as the plain walk, for any chunk size."""
    saved = common.CHUNK
    common.CHUNK = chunk
    try:
        line = run_both(bookings, [])
        plain = PlainTimeline()
        plain.starts, plain.ends = line.starts, line.ends
        for start, length in direct:
            end = start + length
            i = bisect_right(plain.ends, start)
            if i < len(plain.starts) and plain.starts[i] < end:
                continue  # not idle
            line.reserve(start, end)
            plain.reserve(start, end)
            assert (line.starts, line.ends) == (plain.starts, plain.ends)
        check_structure(line)
        for ready, length in queries:
            assert line.earliest_start(ready, length) == plain.earliest_start(ready, length)
    finally:
        common.CHUNK = saved


def test_bench_tool_counts_the_walk_and_loads_a_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    """devtools/bench_timeline.py: the walk length it reports for the old scan, its synthetic case (which
    asserts the answer, after the last block), and a baseline class loaded from a file."""
    from devtools import bench_timeline

    line = DeviceTimeline()
    for k in range(10):
        line.reserve(2.0 * k, 2.0 * k + 1.0)
    assert bench_timeline._walk_length(line, 0.0, 1.0) == 2  # blocks 0 and 1: the gap [1, 2) holds it
    assert bench_timeline._walk_length(line, 0.0, 1.5) == 10  # every block, no gap holds it
    assert bench_timeline._walk_length(line, 19.0, 1.0) == 0  # after the last block: nothing to walk
    bench_timeline.bench_synthetic(1, DeviceTimeline, "current", blocks=50, queries=3)
    assert "synthetic current: 50 blocks, 3 queries" in capsys.readouterr().out
    baseline = bench_timeline._load_baseline(common.__file__)
    assert baseline is not DeviceTimeline and baseline.__name__ == "DeviceTimeline"

"""How many members a fused group gets, from the throughput measured as members join."""

from __future__ import annotations

import pytest

from hpsearch.placement import FusionReading, FusionSizer, choose_members


def readings(*figures: float) -> list[FusionReading]:
    return [FusionReading(2**i, sps, memory_mb=100.0 * 2**i) for i, sps in enumerate(figures)]


def test_members_double_while_each_doubling_pays() -> None:
    choice = choose_members(readings(1000, 1900, 3600, 6500, 11000), max_members=16)
    assert choice.members == 16
    assert choice.gain == pytest.approx(11.0)


def test_a_compute_bound_model_stays_unfused() -> None:
    choice = choose_members(readings(1000, 980, 1900), max_members=16)
    assert choice.members == 1
    assert "2 measured 0.98x the throughput of 1" in choice.reason


def test_a_doubling_must_add_what_packing_asks_of_each_member() -> None:
    # 8 -> 16 adds 8 members: 1.05 ** 8 = 1.48x is asked; 1.3x is not enough.
    choice = choose_members(readings(1000, 1900, 3600, 6500, 6500 * 1.3), max_members=16)
    assert choice.members == 8


def test_max_members_and_memory_bound_the_group() -> None:
    fast = readings(1000, 1900, 3600, 6500, 11000)
    assert choose_members(fast, max_members=4).members == 4
    choice = choose_members(fast, max_members=16, memory_limit_mb=500)
    assert choice.members == 4
    assert "800 MiB of 500" in choice.reason


def test_a_reading_at_one_member_is_needed() -> None:
    with pytest.raises(ValueError, match="one member"):
        choose_members([FusionReading(2, 10.0)], max_members=4)


def test_auto_doubles_a_shape_while_it_pays_then_settles() -> None:
    sizer = FusionSizer(max_members=8, clock=lambda: 0.0)
    idle, busy = ("w32",), ("w512",)
    assert sizer.members(idle) == sizer.members(busy) == 2
    sizer.measured(idle, 2, samples_per_sec=1900.0, solo=1000.0)
    sizer.measured(busy, 2, samples_per_sec=1010.0, solo=1000.0)
    assert sizer.members(idle) == 4
    assert sizer.members(busy) == 1  # fusion does not pay: the shape runs unfused
    sizer.measured(idle, 4, samples_per_sec=2000.0, solo=1000.0)  # 4 barely beats 2
    assert sizer.members(idle) == 2
    sizer.measured(idle, 2, samples_per_sec=5000.0, solo=1000.0)  # settled: no more change
    assert sizer.members(idle) == 2
    assert [d["members"] for d in sizer.decisions] == [4, 1, 2]
    assert "settled" in str(sizer.decisions[1]["reason"])
    assert "2 measured 1.01x" in str(sizer.decisions[1]["reason"])


def test_auto_stops_at_max_members_and_without_a_speed_to_measure() -> None:
    sizer = FusionSizer(max_members=4)
    sizer.measured("a", 2, 1900.0, 1000.0)
    sizer.measured("a", 4, 3700.0, 1000.0)
    assert sizer.members("a") == 4
    sizer.measured("b", 2, None, None)
    assert sizer.members("b") == 1
    assert "no samples_per_sec" in str(sizer.decisions[-1]["reason"])


def test_a_group_that_ran_out_of_memory_caps_its_shape() -> None:
    fixed = FusionSizer(max_members=8, grow=False)
    assert fixed.members("a") == 8
    fixed.ran_out("a", 8)
    assert fixed.members("a") == 4
    assert fixed.members("b") == 8  # another shape keeps its count
    fixed.ran_out("a", 8)  # a group launched before the cap: nothing new
    assert [d["members"] for d in fixed.decisions] == [4]
    assert "a group of 8 ran out of memory: at most 4" in str(fixed.decisions[0]["reason"])

"""How many members a fused group gets, from the throughput measured as members join."""

from __future__ import annotations

import pytest

from hpsearch.placement import FusionReading, choose_members


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

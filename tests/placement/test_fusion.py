"""How many members a fused group gets, from the throughput measured as members join."""

from __future__ import annotations

import pytest

from hpsearch.placement import FusionReading, FusionSizer, TrialProfile, choose_members


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


def test_evidence_from_one_group_jumps_its_shape_and_new_shapes_to_the_doubling_that_fits() -> None:
    # The seeds' RTX 4050: a group of 2 measured 22% of the GPU and 334 MiB, so a
    # member asks 11% and 167 MiB; by utilisation about 8 fit, far fewer than memory.
    sizer = FusionSizer(max_members=16, clock=lambda: 0.0)
    shape = ("w64",)
    sizer.launched(7, shape, sizer.members(shape))
    sizer.evidence(7, TrialProfile(7, 22.0, 334.0), memory_total_mb=6141.0)
    assert sizer.members(shape) == 8  # not 4: one doubling per measured group
    assert sizer.members(("w128",)) == 8  # a shape not seen yet starts there too
    reason = str(sizer.decisions[-1]["reason"])
    assert reason.startswith("trying 8: a group of 2 measured 22.0% of its GPU and 334 MiB")
    assert "throughput 11.0% each" in reason
    # The throughput still judges: 8 measured short of 2's gain backs off to 4.
    sizer.measured(shape, 2, samples_per_sec=1900.0, solo=1000.0)
    sizer.measured(shape, 8, samples_per_sec=2000.0, solo=1000.0)
    assert sizer.members(shape) == 4
    assert str(sizer.decisions[-1]["reason"]).startswith("backing off to 4: 2 member(s)")
    sizer.evidence(7, TrialProfile(7, 22.0, 334.0), memory_total_mb=6141.0)  # said again
    assert sizer.members(shape) == 4  # 8 was measured short: the evidence does not undo it
    sizer.measured(shape, 4, samples_per_sec=3600.0, solo=1000.0)
    assert sizer.members(shape) == 4
    assert str(sizer.decisions[-1]["reason"]).startswith("settled: 4 member(s)")


def test_evidence_of_a_busy_or_large_group_grows_nothing_and_memory_caps_the_shape() -> None:
    sizer = FusionSizer(max_members=16, clock=lambda: 0.0)
    sizer.launched(1, "busy", 2)
    sizer.evidence(1, TrialProfile(1, 96.0, 900.0), memory_total_mb=80_000.0)
    assert sizer.members("busy") == 2  # a member fills half the GPU: no jump
    sizer.launched(2, "large", 2)
    # 2 members took 30 GiB of a 40 GiB card: 15 GiB each, 36 GiB usable → 2 fit.
    sizer.evidence(2, TrialProfile(2, 10.0, 30_720.0), memory_total_mb=40_960.0)
    sizer.measured("large", 2, samples_per_sec=1900.0, solo=1000.0)
    assert sizer.members("large") == 2  # the doubling pays, but 4 would not fit
    assert "at most 2: a group of 2" in str(sizer.decisions[0]["reason"])
    fixed = FusionSizer(max_members=4, grow=False)
    fixed.launched(3, "a", 4)
    fixed.evidence(3, TrialProfile(3, 4.0, 400.0), memory_total_mb=80_000.0)
    assert fixed.members("a") == 4
    assert not fixed.decisions
    sizer.evidence(99, TrialProfile(99, 1.0, 100.0), memory_total_mb=80_000.0)  # unknown launch
    assert sizer.members("new") == 2


def test_a_group_holds_no_more_members_than_its_launchs_share_of_memory_fits() -> None:
    # The lab's short trials: a group of 2 measured 6% of a 73 GB GPU and 3486 MiB, so
    # 16 members fit the whole GPU, but a launch among eight packed on it gets 1/8.
    sizer = FusionSizer(max_members=16, clock=lambda: 0.0)
    shape = ("w256",)
    sizer.launched(4, shape, sizer.members_within(shape, 0.125))
    sizer.evidence(4, TrialProfile(4, 6.0, 3486.0), memory_total_mb=73_403.0)
    assert sizer.members(shape) == 16  # by the whole GPU
    # A member asks 1743 MiB of 66 063 usable (2.6%): 4 in an eighth, 16 in the whole.
    assert sizer.members_within(shape, 0.125) == 4
    assert sizer.members_within(shape, 1.0) == 16
    assert sizer.members_within(shape, 0.0) == 16  # no share given: the sizer's count
    assert sizer.members_within(("w512",), 0.25) == 9  # a shape not measured: the same member
    said = [str(d["reason"]) for d in sizer.decisions]
    assert "4 member(s) in a launch of 12% of its GPU: a member asks 2.6%" in said[-2]
    sizer.members_within(shape, 0.125)
    assert len(sizer.decisions) == len(said)  # said once per shape and count
    # A fixed size is the user's: no share caps it.
    fixed = FusionSizer(max_members=8, grow=False)
    fixed.launched(1, shape, 8)
    fixed.evidence(1, TrialProfile(1, 6.0, 3486.0), memory_total_mb=73_403.0)
    assert fixed.members_within(shape, 0.125) == 8


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


TOTAL = 81_559.0
"""An 80 GB card (73 403 MiB usable with packing's default headroom)."""


def test_a_nearly_empty_gpu_doubles_groups_once_their_process_has_been_read() -> None:
    sizer = FusionSizer(max_members=16, clock=Clock())
    shape = ("w256",)
    sizer.launched(1, shape, sizer.members_within(shape, 1.0, room_seen_at=None))
    assert sizer.members(shape) == 2
    # No sample has read the group's process yet (a worker still starting): no doubling.
    assert sizer.members_within(shape, 0.5, room_seen_at=1.0) == 2
    sizer.holds(1, 700.0, memory_total_mb=TOTAL)
    first = sizer.members_within(shape, 0.5, room_seen_at=2.0)
    assert first == 4
    sizer.launched(2, shape, first)
    # Two launches before the new group is read double once, not twice.
    assert sizer.members_within(shape, 0.25, room_seen_at=2.5) == 4
    sizer.holds(2, 1300.0, memory_total_mb=TOTAL)
    assert sizer.members_within(shape, 0.25, room_seen_at=3.0) == 8
    assert sizer.members_within(shape, 0.25, room_seen_at=None) == 8  # it holds after
    said = [str(d["reason"]) for d in sizer.decisions]
    assert said == [
        "trying 4: a group of 2 runs on a GPU its latest samples show nearly empty",
        "trying 8: a group of 4 runs on a GPU its latest samples show nearly empty",
    ]


def test_a_roomy_doubling_stops_at_caps_measured_shortfalls_and_a_settled_shape() -> None:
    capped = FusionSizer(max_members=16, clock=Clock())
    capped.launched(1, "a", 8)
    capped.holds(1, 1000.0, memory_total_mb=TOTAL)
    capped.ran_out("a", 8)  # at most 4
    assert capped.members_within("a", 1.0, room_seen_at=1.0) == 4
    short = FusionSizer(max_members=16, clock=Clock())
    short.launched(1, "b", 2)
    short.measured("b", 2, samples_per_sec=1900.0, solo=1000.0)  # trying 4
    short.launched(2, "b", 4)
    short.holds(2, 1000.0, memory_total_mb=TOTAL)
    short.measured("b", 4, samples_per_sec=1950.0, solo=1000.0)  # 4 did not pay
    assert short.members_within("b", 1.0, room_seen_at=1.0) == 2  # settled, not doubled
    fixed = FusionSizer(max_members=4, grow=False, clock=Clock())
    fixed.launched(1, "c", 4)
    fixed.holds(1, 1000.0, memory_total_mb=TOTAL)
    assert fixed.members_within("c", 1.0, room_seen_at=1.0) == 4


def test_a_groups_first_samples_cap_the_next_launches_before_it_reports() -> None:
    # Short trials on an 80 GB card: a group of 2 holds 3486 MiB from its first samples.
    sizer = FusionSizer(max_members=16, clock=Clock())
    shape = ("w256",)
    sizer.launched(1, shape, 2)
    sizer.holds(1, 3486.0, memory_total_mb=TOTAL)
    assert sizer.members_within(shape, 0.25, room_seen_at=0.4) == 4
    sizer.launched(2, shape, 4)
    sizer.holds(2, 6972.0, memory_total_mb=TOTAL)  # 1743 MiB a member again: no context seen
    # Doubling 4 on a roomy GPU, but a launch among eight gets an eighth of the memory:
    # 1743 MiB a member of 73 403 usable (2.4%) → 5, not 8.
    assert sizer.members_within(shape, 0.125, room_seen_at=0.9) == 5
    sizer.holds(99, 50_000.0, memory_total_mb=TOTAL)  # not a group: nothing learned
    assert sizer.members_within(shape, 0.125) == 5
    assert sizer.members_within(shape, 0.5) == 8
    fixed = FusionSizer(max_members=8, grow=False)
    fixed.launched(1, shape, 8)
    fixed.holds(1, 60_000.0, memory_total_mb=TOTAL)
    assert fixed.members_within(shape, 0.125) == 8


def test_groups_of_two_sizes_tell_a_members_memory_from_its_processs_context() -> None:
    # The sharing model's 3 s trials: a context of 610 MiB and 1438 MiB a member, so a
    # group of 2 holds 3486 MiB and one of 4 6362 MiB.
    sizer = FusionSizer(max_members=16, clock=Clock())
    shape = ("w256",)
    sizer.launched(1, shape, 8)
    sizer.holds(1, 8 * 1743.0, memory_total_mb=TOTAL)
    # One size read: 1743 MiB a member, the context counted in each → 7 in a sixth.
    assert sizer.members_within(shape, 1 / 6, room_seen_at=1.0) == 7
    sizer.launched(2, shape, 16)
    sizer.evidence(2, TrialProfile(2, 20.0, 1438.0 * 16 + 610.0), memory_total_mb=TOTAL)
    sizer.launched(3, shape, 4)
    sizer.holds(3, 6362.0, memory_total_mb=TOTAL)
    # The line through 4 and 16 members: 1438 MiB a member (2.0%), 610 for the process
    # (0.8%) → (16.7% - 0.8%) / 2.0% = 8 in a sixth, where 1743 a member fitted 7.
    assert sizer.members_within(shape, 1 / 6) == 8
    reason = str(sizer.decisions[-1]["reason"])
    assert reason == (
        "8 member(s) in a launch of 17% of its GPU: a member asks 2.0% of its usable "
        "memory, the group's process 0.8%"
    )
    # A shape not read yet is capped as the largest one read.
    assert sizer.members_within(("w512",), 1 / 6) == 8


def test_a_search_of_ever_new_shapes_remembers_only_the_recent_ones() -> None:
    kept = FusionSizer(max_members=16, clock=Clock())
    kept.launched(0, "first", 8)
    kept.holds(0, 1000.0, memory_total_mb=TOTAL)
    assert kept.members_within("first", 1.0, room_seen_at=1.0) == 16
    forgot = FusionSizer(max_members=16, clock=Clock())
    forgot.launched(0, "first", 8)
    forgot.holds(0, 1000.0, memory_total_mb=TOTAL)
    for number in range(1, 300):  # widths that never repeat, each read
        forgot.launched(number, f"w{number}", 2)
        forgot.holds(number, 700.0, memory_total_mb=TOTAL)
    # Its group of 8 is forgotten: nothing to double, a shape's start.
    assert forgot.members_within("first", 1.0, room_seen_at=1.0) == 2

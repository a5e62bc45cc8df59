"""The fence's rules (``juju.fence``): when a leader may run GARM, and who it waits for."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from juju.fence import (
    CHECK_SECONDS,
    LONGEST_LEASE,
    MARGIN_SECONDS,
    PACE_WITHOUT_TIMER,
    SLACK_SECONDS,
    Memory,
    Stamp,
    decide,
    lease_seconds,
    pace,
    read_memory,
    read_record,
    render_memory,
)
from tests.wire import T0

ME = "garm/1"
LEASE = lease_seconds(30)
WAIT = timedelta(seconds=LEASE + CHECK_SECONDS + MARGIN_SECONDS)


def test_without_a_peer_relation_no_other_unit_exists_to_wait_for() -> None:
    verdict = decide(ME, None, Memory(), False, LEASE, T0)
    assert (verdict.may_run, verdict.lease, verdict.record) == (True, LEASE, None)


def test_a_first_leader_tells_the_others_before_it_starts() -> None:
    verdict = decide(ME, {}, Memory(), False, LEASE, T0)
    assert not verdict.may_run
    assert verdict.record == LEASE
    assert verdict.waiting.startswith("Telling the other units")


def test_once_its_record_is_committed_it_may_run_with_that_lease() -> None:
    verdict = decide(ME, {ME: str(LEASE)}, Memory(), False, LEASE, T0)
    assert (verdict.may_run, verdict.lease, verdict.record) == (True, LEASE, None)


def test_a_garm_already_running_here_keeps_running_while_its_record_is_written() -> None:
    verdict = decide(ME, {}, Memory(), True, LEASE, T0)
    assert (verdict.may_run, verdict.record) == (True, LEASE)


def test_another_units_record_is_waited_for_from_when_this_leader_first_saw_it() -> None:
    records = {ME: str(LEASE), "garm/0": str(LEASE)}
    first = decide(ME, records, Memory(), False, LEASE, T0)
    assert not first.may_run
    assert first.memory == Memory(T0, {"garm/0": Stamp(LEASE, T0)})
    assert first.until == T0 + WAIT
    assert (
        first.waiting == "Waiting for garm/0 to stop its GARM (its lease ends in 4m 10s at most)"
    )
    # Passes at the timer's pace keep the stamp.
    memory, now = first.memory, T0
    while now < T0 + WAIT - timedelta(seconds=30):
        now += timedelta(seconds=30)
        verdict = decide(ME, records, memory, False, LEASE, now)
        assert not verdict.may_run
        memory = verdict.memory
    assert decide(ME, records, memory, False, LEASE, T0 + WAIT).may_run


def test_a_running_garm_here_never_skips_the_wait_for_another_record() -> None:
    verdict = decide(ME, {"garm/0": str(LEASE)}, Memory(), True, LEASE, T0)
    assert not verdict.may_run


def test_stamps_made_before_a_gap_as_long_as_this_units_lease_are_no_proof() -> None:
    records = {ME: str(LEASE), "garm/0": str(LEASE)}
    old = Memory(T0, {"garm/0": Stamp(LEASE, T0 - timedelta(hours=1))})
    gap = T0 + timedelta(seconds=LEASE)
    verdict = decide(ME, records, old, False, LEASE, gap)
    assert not verdict.may_run
    assert verdict.memory == Memory(gap, {"garm/0": Stamp(LEASE, gap)})
    just = decide(ME, records, old, False, LEASE, gap - timedelta(seconds=1))
    assert just.may_run
    # A clock that went back is no proof either.
    assert not decide(ME, records, old, False, LEASE, T0 - timedelta(seconds=1)).may_run


def test_a_record_that_names_another_lease_is_waited_for_anew() -> None:
    records = {ME: str(LEASE), "garm/0": "900"}
    now = T0 + timedelta(hours=1)
    old = Memory(now - timedelta(seconds=30), {"garm/0": Stamp(LEASE, T0)})
    verdict = decide(ME, records, old, False, LEASE, now)
    assert verdict.memory.stamps == {"garm/0": Stamp(900, now)}
    assert verdict.until == now + timedelta(seconds=900 + CHECK_SECONDS + MARGIN_SECONDS)


def test_a_record_that_does_not_read_is_waited_for_as_the_longest_lease() -> None:
    assert read_record("soon") == LONGEST_LEASE
    assert read_record("0") == LONGEST_LEASE
    assert read_record(str(LONGEST_LEASE + 1)) == LONGEST_LEASE
    assert read_record("210") == 210
    assert read_record("²") == LONGEST_LEASE  # a digit to str.isdigit, not to int()
    assert read_record(None) is None


def test_a_shorter_lease_is_used_at_once_and_a_longer_one_once_committed() -> None:
    shorter = decide(ME, {ME: "900"}, Memory(), True, LEASE, T0)
    assert (shorter.lease, shorter.record) == (LEASE, LEASE)
    longer = decide(ME, {ME: "120"}, Memory(), True, LEASE, T0)
    assert (longer.lease, longer.record) == (120, LEASE)


def test_a_live_unit_not_yet_joined_is_waited_for_until_it_joins() -> None:
    """A leader elected before its peers' -joined cannot read their records."""
    verdict = decide(ME, {ME: "210"}, Memory(), False, LEASE, T0, unseen={"garm/2"})
    assert not verdict.may_run
    assert verdict.waiting == "Waiting for garm/2 to join the peer relation (3h 02m 40s at most)"
    # Joined, without a record: nothing to wait for.
    assert decide(ME, {ME: "210"}, verdict.memory, False, LEASE, T0).may_run
    # Joined with one: waited for as its own lease, from when it was seen.
    joined = decide(ME, {ME: "210", "garm/2": "210"}, verdict.memory, False, LEASE, T0)
    assert joined.waiting.startswith("Waiting for garm/2 to stop its GARM")
    # No peer relation yet but a unit Juju lists: not a lone unit.
    assert not decide(ME, None, Memory(), False, LEASE, T0, unseen={"garm/2"}).may_run


def test_a_config_that_does_not_read_keeps_the_lease_recorded() -> None:
    kept = decide(ME, {ME: "900"}, Memory(), True, None, T0)
    assert (kept.may_run, kept.lease, kept.record) == (True, 900, None)
    first = decide(ME, {}, Memory(), True, None, T0)
    assert (first.may_run, first.lease, first.record) == (True, lease_seconds(0), lease_seconds(0))


def test_the_wait_names_the_unit_that_holds_it_longest() -> None:
    records = {ME: "210", "garm/0": "210", "garm/2": "900"}
    verdict = decide(ME, records, Memory(), False, LEASE, T0)
    assert verdict.waiting.startswith("Waiting for garm/2 ")


def test_the_lease_covers_three_passes_and_two_minutes() -> None:
    assert lease_seconds(30) == 210
    assert lease_seconds(3600) == LONGEST_LEASE
    assert lease_seconds(0) == 3 * 300 + 120  # passes from update-status alone


def test_the_memory_reads_back_and_anything_unreadable_is_forgotten() -> None:
    memory = Memory(T0, {"garm/0": Stamp(210, T0)})
    assert read_memory(render_memory(memory)) == memory
    bad = ('{"last": null, "stamps": {}}', '{"last": "x", "stamps": {}}', "[]", "{")
    naive = '{"last": "2026-01-01T00:00:00", "stamps": {}}'
    deep = "[" * 100_000
    for text in (
        None,
        "",
        *bad,
        naive,
        deep,
        '{"last": "2026-01-01T00:00:00+00:00", "stamps": []}',
    ):
        assert read_memory(text) == Memory()


@given(
    start=st.integers(0, 10_000),
    steps=st.lists(st.integers(1, 400), min_size=1, max_size=30),
    lease=st.sampled_from([210, 390, 1020]),
)
def test_no_leader_runs_before_the_other_units_lease_and_a_check_have_passed(
    start: int, steps: list[int], lease: int
) -> None:
    """Whatever its passes' pace, the leader starts only once garm/0's GARM is stopped.

    garm/0 last renewed its lease before this unit led (Juju grants one lease at a
    time), so its GARM stops by ``lease + CHECK_SECONDS`` after this unit first saw it.
    """
    now = T0 + timedelta(seconds=start)
    first_seen = now
    records = {ME: "210", "garm/0": str(lease)}
    memory, held = Memory(), False
    for step in steps:
        verdict = decide(ME, records, memory, held, LEASE, now)
        if verdict.may_run:
            assert now >= first_seen + timedelta(seconds=lease + CHECK_SECONDS)
        memory, held = verdict.memory, verdict.may_run
        now += timedelta(seconds=step)


# --- the lease sets the timer's pace; not knowing counts as another GARM --------------


@given(st.sampled_from([0, 10, 30, 45, 60, 300, 600, 3600]))
def test_the_pace_of_a_lease_is_the_interval_it_was_made_for(interval: int) -> None:
    assert pace(lease_seconds(interval)) == (interval or PACE_WITHOUT_TIMER)


@given(st.integers(1, LONGEST_LEASE))
def test_a_lease_outlasts_the_pass_after_next_at_its_pace(lease: int) -> None:
    # Two passes at the pace, each late by a minute, still come before the lease ends.
    assert 2 * (pace(lease) + 60) <= lease or lease < SLACK_SECONDS + 3


def test_raising_the_interval_keeps_the_old_lease_until_its_record_is_committed() -> None:
    longer = lease_seconds(600)
    first = decide(ME, {ME: str(LEASE)}, Memory(), True, longer, T0)
    assert (first.lease, first.record, pace(first.lease)) == (LEASE, longer, 30)
    committed = decide(ME, {ME: str(longer)}, first.memory, True, longer, T0 + timedelta(30))
    assert (committed.lease, committed.record, pace(committed.lease)) == (longer, None, 600)


def test_without_goal_state_nor_peers_a_leader_waits_for_an_unknown_unit() -> None:
    verdict = decide(ME, None, Memory(), False, LEASE, T0, None)
    assert not verdict.may_run
    assert verdict.waiting.startswith("Waiting for goal-state to list this application's")
    assert verdict.until == T0 + timedelta(seconds=LONGEST_LEASE + CHECK_SECONDS + MARGIN_SECONDS)


def test_without_goal_state_a_leader_that_led_without_a_gap_goes_on_as_it_knew() -> None:
    records = {ME: str(LEASE)}
    knew = decide(ME, records, Memory(), True, LEASE, T0)
    assert knew.may_run
    later = decide(ME, records, knew.memory, True, LEASE, T0 + timedelta(seconds=30), None)
    assert later.may_run
    # ... but not over a gap as long as its lease: another unit may have led meanwhile.
    gap = T0 + timedelta(seconds=LEASE + 30)
    assert not decide(ME, records, knew.memory, False, LEASE, gap, None).may_run


def test_a_unit_waited_for_unseen_is_still_waited_for_when_goal_state_fails() -> None:
    records = {ME: str(LEASE)}
    first = decide(ME, records, Memory(), False, LEASE, T0, {"garm/0"})
    assert not first.may_run
    blind = decide(ME, records, first.memory, False, LEASE, T0 + timedelta(seconds=30), None)
    assert not blind.may_run
    assert blind.waiting.startswith("Waiting for garm/0 to join the peer relation")


def test_without_goal_state_a_unit_whose_wait_ended_is_not_waited_for_again() -> None:
    """garm/0's wait ended long ago; it then clears its record in a hook where goal-state
    fails: the leader goes on as it knew, rather than waiting three hours for it."""
    records = {ME: str(LEASE), "garm/0": str(LEASE)}
    memory, now = decide(ME, records, Memory(), True, LEASE, T0).memory, T0
    while now < T0 + WAIT:
        now += timedelta(seconds=30)
        memory = decide(ME, records, memory, True, LEASE, now).memory
    assert decide(ME, records, memory, True, LEASE, now).may_run
    cleared = decide(ME, {ME: str(LEASE)}, memory, True, LEASE, now + timedelta(seconds=30), None)
    assert cleared.may_run


def test_lowering_the_interval_keeps_the_stamps_while_the_recorded_lease_holds() -> None:
    """Others wait out the lease this unit's record names: a pass an hour's pace after
    the last one, with the interval just lowered, still leads without a gap."""
    long = lease_seconds(3600)
    knew = decide(ME, {ME: str(long)}, Memory(), True, long, T0)
    later = T0 + timedelta(seconds=3600)
    verdict = decide(ME, {ME: str(long)}, knew.memory, True, lease_seconds(60), later, None)
    assert verdict.may_run
    assert verdict.lease == lease_seconds(60)

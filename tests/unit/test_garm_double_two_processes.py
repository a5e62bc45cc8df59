"""The GARM double playing two GARM processes on one database (``GarmDouble.add_process``).

Seen on a real GARM (docs/reference/garm-api.md, section 8.1): two GARMs on one
PostgreSQL kill each other's runners. Each process works from its own memory (its runner
cache, its copy of each scale set), fed only by its own writes; every 5 minutes each one
deletes the provider VMs it does not know, busy or not, and leaves their rows behind as
ghosts that only a process knowing them ever marks. These tests hold the double to that,
and to the cost of the second listener GitHub refuses. The first process is the one the
double has always played (``garm.process()``); the second is "unit garm/1's GARM".
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import requests

from tests.clock import FakeClock
from tests.garm_double import (
    CONSOLIDATION_INTERVAL,
    LISTENER_DELAY,
    LISTENER_RETRY,
    STARTUP_LISTENER_DELAY,
    GarmDouble,
    GarmProcess,
)

OTHER = "garm/1"
STEP = timedelta(seconds=5)


class Api:
    """The admin's calls to one GARM process's own port."""

    def __init__(self, garm: GarmDouble, url: str):
        self.base = url + "/api/v1"
        login = requests.post(
            self.base + "/auth/login",
            json={"username": garm.username, "password": garm.password},
            timeout=5,
        )
        login.raise_for_status()
        self.headers = {"Authorization": f"Bearer {login.json()['token']}"}

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = requests.request(
            method, self.base + path, json=body, headers=self.headers, timeout=5
        )
        answer.raise_for_status()
        return answer.json() if answer.content else None


def create_scaleset(garm: GarmDouble, url: str, **extra: Any) -> int:
    """A scale set created through the GARM process at ``url``; returns its id."""
    org_id = next((e["id"] for e in garm.entities()), None) or garm.add_org("example-org")
    body = {
        "name": "ci-linux",
        "provider_name": "openstack",
        "max_runners": 5,
        "min_idle_runners": 0,
        "image": "image-uuid",
        "flavor": "m1.small",
        "os_type": "linux",
        "os_arch": "amd64",
        "enabled": True,
        "labels": ["ci"],
        **extra,
    }
    return Api(garm, url).call("POST", f"/organizations/{org_id}/scalesets", body)["id"]


def run(garm: GarmDouble, clock: FakeClock, duration: timedelta) -> None:
    """Let ``duration`` pass, GARM's workers running every ``STEP``."""
    end = clock.now + duration
    while clock.now < end:
        clock.advance(min(STEP, end - clock.now))
        garm.tick()


def row(garm: GarmDouble, name: str) -> dict[str, Any] | None:
    return next((i for i in garm.instances() if i["name"] == name), None)


def the_row(garm: GarmDouble, name: str) -> dict[str, Any]:
    found = row(garm, name)
    assert found is not None, f"no instance {name} in the database"
    return found


def view(process: GarmProcess, scaleset_id: int) -> dict[str, Any]:
    found = process.scaleset_view(scaleset_id)
    assert found is not None, f"{process.name} runs no worker for scaleset {scaleset_id}"
    return found


def names(garm: GarmDouble) -> set[str]:
    return {i["name"] for i in garm.instances()}


@pytest.fixture
def first(garm: GarmDouble) -> GarmProcess:
    garm.add_provider("openstack")
    return garm.process()


def two_processes_with_the_first_listening(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess, **scaleset: Any
) -> tuple[int, GarmProcess]:
    """A scale set made through the first process, which opens its session; then the
    second process starts on the same database (and loads the scale set)."""
    scaleset_id = create_scaleset(garm, first.url, **scaleset)
    clock.advance(LISTENER_DELAY)
    assert first.listening(scaleset_id)
    other = garm.add_process(OTHER)
    assert other.scalesets() == [scaleset_id]
    return scaleset_id, other


def runners_for_jobs(garm: GarmDouble, clock: FakeClock, scaleset_id: int, jobs: int) -> list[str]:
    """GitHub assigns ``jobs`` jobs; the listening process scales up for them and its new
    runners come up and report idle."""
    before = names(garm)
    assert garm.assign_jobs(scaleset_id, jobs)
    run(garm, clock, 3 * STEP)
    made = sorted(names(garm) - before)
    assert len(made) == jobs
    assert all(the_row(garm, n)["runner_status"] == "idle" for n in made)
    return made


def until_consolidation_of(garm: GarmDouble, clock: FakeClock, proc: GarmProcess) -> None:
    """Tick on until ``proc``'s next consolidation has run."""
    deadline = clock.now + CONSOLIDATION_INTERVAL + STEP
    before = garm.provider_deletions[:]
    while clock.now < deadline and garm.provider_deletions == before:
        run(garm, clock, STEP)
    run(garm, clock, STEP)


def test_a_busy_runner_one_process_made_is_killed_by_the_others_consolidation(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    scaleset_id, other = two_processes_with_the_first_listening(garm, clock, first)
    (busy,) = runners_for_jobs(garm, clock, scaleset_id, 1)
    garm.start_job(busy)
    assert busy in first.runners()
    assert busy not in other.runners()

    until_consolidation_of(garm, clock, other)

    assert [(n, p) for n, p, _ in garm.lost_jobs] == [(busy, OTHER)]
    assert not garm.has_vm(busy)
    # The database still says the runner is running its job: a ghost.
    ghost = the_row(garm, busy)
    assert (ghost["status"], ghost["runner_status"]) == ("running", "active")
    assert garm.ghosts() == [busy]
    with pytest.raises(ValueError, match="lost its VM"):
        garm.finish_job(busy)


def test_the_others_idle_runners_are_removed_from_the_provider_again_and_again(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    scaleset_id, other = two_processes_with_the_first_listening(garm, clock, first)
    idle = runners_for_jobs(garm, clock, scaleset_id, 2)

    other.consolidate()

    assert sorted((n, p, busy) for n, p, _, busy in garm.provider_deletions) == [
        (n, OTHER, False) for n in idle
    ]
    assert garm.lost_jobs == []
    assert sorted(garm.ghosts()) == idle
    # The first process reconciles its own ghosts at its next check, then makes new
    # runners for the jobs it still counts, which the other does not know either.
    first.consolidate()
    run(garm, clock, 4 * STEP)
    assert garm.ghosts() == []
    replacements = sorted(names(garm))
    assert len(replacements) == 2 and not set(replacements) & set(idle)
    assert not set(replacements) & set(other.runners())
    other.consolidate()
    assert sorted(garm.ghosts()) == replacements


def test_both_processes_scale_to_min_idle_with_runners_the_other_does_not_know(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    scaleset_id = create_scaleset(garm, first.url, min_idle_runners=2)
    other = garm.add_process(OTHER)

    run(garm, clock, STEP)

    mine, theirs = set(first.runners()), set(other.runners())
    assert len(mine) == len(theirs) == 2
    assert not mine & theirs
    assert mine | theirs == names(garm)  # four runners for a min-idle of two
    assert view(other, scaleset_id)["min_idle_runners"] == 2
    # The runners report to the callback URL, the first process's: it learns the
    # other's runners that way; the other never learns the first's.
    run(garm, clock, 2 * STEP)
    assert theirs <= set(first.runners())
    assert not mine & set(other.runners())


def test_a_ghost_is_never_reconciled_by_a_process_that_did_not_know_it_until_it_restarts(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    scaleset_id, other = two_processes_with_the_first_listening(garm, clock, first)
    (busy,) = runners_for_jobs(garm, clock, scaleset_id, 1)
    garm.start_job(busy)
    other.consolidate()
    assert garm.ghosts() == [busy]
    first.stop()  # the one process that knew the runner

    run(garm, clock, 3 * CONSOLIDATION_INTERVAL)
    assert garm.ghosts() == [busy]
    assert the_row(garm, busy)["status"] == "running"
    assert busy not in other.runners()

    other.restart()  # it loads every row, the ghost included
    assert busy in other.runners()
    run(garm, clock, CONSOLIDATION_INTERVAL + 2 * STEP)
    assert garm.ghosts() == []
    assert row(garm, busy) is None
    assert set(other.runners()) == names(garm)


def test_github_grants_one_session_and_the_loser_pays_a_token_call_per_retry(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    scaleset_id, other = two_processes_with_the_first_listening(garm, clock, first)
    minute = timedelta(minutes=1)

    clock.advance(STARTUP_LISTENER_DELAY + minute)

    assert first.listening(scaleset_id) and not other.listening(scaleset_id)
    assert first.registration_token_calls(scaleset_id) == 1
    assert other.registration_token_calls(scaleset_id) == minute // LISTENER_RETRY + 1
    clock.advance(minute)
    assert other.registration_token_calls(scaleset_id) == 2 * (minute // LISTENER_RETRY) + 1

    first.stop()
    assert garm.listening(scaleset_id) is False
    clock.advance(LISTENER_RETRY)
    assert other.listening(scaleset_id)
    calls = other.registration_token_calls(scaleset_id)
    clock.advance(minute)
    assert other.registration_token_calls(scaleset_id) == calls
    first.start()  # now the first one is refused, and pays
    clock.advance(STARTUP_LISTENER_DELAY + minute)
    assert other.listening(scaleset_id) and not first.listening(scaleset_id)
    assert first.registration_token_calls(scaleset_id) == 1 + minute // LISTENER_RETRY + 1


def the_second_process_listening_with_a_busy_runner_of_its_own(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
) -> tuple[int, GarmProcess, str]:
    """The second process holds the session and made a busy runner that the first process
    does not know: its callbacks reach the second process, and so did the job's start."""
    scaleset_id, other = two_processes_with_the_first_listening(garm, clock, first)
    first.stop()
    clock.advance(LISTENER_RETRY)
    first.start()
    clock.advance(STARTUP_LISTENER_DELAY)
    assert other.listening(scaleset_id) and not first.listening(scaleset_id)
    garm.callbacks_to = OTHER
    (busy,) = runners_for_jobs(garm, clock, scaleset_id, 1)
    garm.start_job(busy)
    assert busy in other.runners() and busy not in first.runners()
    return scaleset_id, other, busy


def test_a_survivor_that_was_not_restarted_still_kills_what_it_never_learnt(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    _, other, busy = the_second_process_listening_with_a_busy_runner_of_its_own(garm, clock, first)
    other.stop()

    first.consolidate()

    assert [(n, p) for n, p, _ in garm.lost_jobs] == [(busy, first.name)]


def test_a_survivor_restarted_alone_kills_nothing_and_converges(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    scaleset_id, other, busy = the_second_process_listening_with_a_busy_runner_of_its_own(
        garm, clock, first
    )
    other.stop()
    first.restart()
    assert busy in first.runners()

    run(garm, clock, 2 * CONSOLIDATION_INTERVAL)
    assert garm.provider_deletions == [] and garm.lost_jobs == []
    assert first.listening(scaleset_id)
    assert garm.finish_job(busy)
    run(garm, clock, 2 * STEP)

    assert row(garm, busy) is None
    assert garm.ghosts() == []
    assert set(first.runners()) == names(garm)
    assert garm.provider_deletions == [] and garm.lost_jobs == []


def test_a_scaleset_made_through_one_process_is_unknown_to_the_other_until_it_restarts(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    other = garm.add_process(OTHER)
    scaleset_id = create_scaleset(garm, first.url, min_idle_runners=1)

    run(garm, clock, 3 * STEP)
    assert other.scalesets() == [] and other.runners() == []
    assert len(first.runners()) == 1
    assert other.registration_token_calls() == 0

    other.restart()
    assert other.scalesets() == [scaleset_id]
    assert other.runners() == first.runners()


def test_an_update_through_one_process_leaves_the_others_copy_stale(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    scaleset_id, other = two_processes_with_the_first_listening(garm, clock, first)
    api = Api(garm, first.url)

    api.call("PUT", f"/scalesets/{scaleset_id}", {"min_idle_runners": 2, "enabled": False})

    assert view(first, scaleset_id)["enabled"] is False
    assert view(other, scaleset_id)["enabled"] is True
    assert view(other, scaleset_id)["min_idle_runners"] == 0
    # The first process closed its session; the other, whose copy still says enabled,
    # takes it at its next retry and listens on a scale set the database says is off.
    clock.advance(STARTUP_LISTENER_DELAY + LISTENER_RETRY)
    assert other.listening(scaleset_id) and garm.listening(scaleset_id)


def test_each_process_serves_the_one_database_on_its_own_port(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    scaleset_id, other = two_processes_with_the_first_listening(garm, clock, first)
    assert other.url != first.url

    listed = Api(garm, other.url).call("GET", "/scalesets")

    assert [s["id"] for s in listed] == [scaleset_id]
    assert garm.requests[-1].process == OTHER
    port = other.port
    other.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(other.url + "/api/v1/scalesets", timeout=5)
    other.start()
    assert other.port == port
    assert [s["id"] for s in Api(garm, other.url).call("GET", "/scalesets")] == [scaleset_id]


def test_a_delete_through_one_process_teaches_it_the_runner(
    garm: GarmDouble, clock: FakeClock, first: GarmProcess
):
    scaleset_id, other = two_processes_with_the_first_listening(garm, clock, first)
    (idle,) = runners_for_jobs(garm, clock, scaleset_id, 1)
    assert idle not in other.runners()

    Api(garm, other.url).call("DELETE", f"/instances/{idle}")

    assert idle in other.runners()
    run(garm, clock, STEP)
    assert row(garm, idle) is None

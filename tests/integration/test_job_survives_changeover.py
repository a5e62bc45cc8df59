"""On a real Juju, OpenStack and GitHub: a job started before a label change ends on the
generation it started on, which is deleted only afterwards.

The point of blue-green replacement (docs/how-to/change-labels.md): no job is cut short.
The story, with the workflow of tests/integration/README.md:

1. garm and the configurator stand-in are deployed with the real provider and one idle
   runner; one generation serves the old labels.
2. The workflow is dispatched with ``runs-on`` the old labels and a sleep that outlasts the
   changeover; the test waits until GitHub shows its job ``in_progress`` on a runner while
   ``show-scalesets`` shows the only generation with ``busy`` 1. GARM's runner names do not
   say their generation, and ``show-scalesets`` lists no runner names: the link is that
   the job started while the old generation was the only one, and that no later
   generation carries all of its labels (the new labels drop ``x64``).
3. The labels change. While the job runs, ``show-scalesets`` must show the old generation
   ``draining`` with ``busy`` 1 beside a new, current generation ``serving`` the new
   labels; it must list the old generation for as long as GitHub shows the job running.
4. The job's conclusion is ``success`` on the runner it started on, in its first attempt;
   only then does the old generation go: ``1 scaleset in sync``, ``plan`` converged, one
   generation left, the new one.

Each wait is bounded and names what it waited for; each fails at once when a unit of the
test goes into error (``_failed``). Every GitHub read comes before the GARM read it is
checked against, and never the other way: a job seen running *after* its generation was
seen gone was running while it was gone.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jubilant
import pytest

from tests.integration.test_label_change import (
    CHANGE_TIMEOUT,
    SETTLED,
    STUB,
    _assert_converged,
    _databag,
    _failed,
    _generations,
    _message,
    _serving,
    deploy_related,
)

if TYPE_CHECKING:
    from tests.integration.conftest import ChangeoverSettings, Settings

API = "https://api.github.com"
WORKFLOW = "garm-changeover.yaml"  # in the repository's .github/workflows/ (README)
# A scale set name of its own, apart from test_label_change's `sm-x64`.
NAME = "jc-x64"
OLD_LABELS = "self-hosted,linux,x64"
NEW_LABELS = "self-hosted,linux,x64-next"  # drops `x64`: only the old generation fits the job
# The old generation is retired once the new one has an idle runner, or after this long.
HANDOVER_MINUTES = 10
# How long the job sleeps: the pick-up check, then the changeover (a new VM boots, the
# hand-over, the retirement) must all fall inside it, with room to spare.
JOB_SECONDS = 25 * 60
DISPATCH_TIMEOUT = 5 * 60  # GitHub lists a dispatched run within seconds, usually
PICKUP_TIMEOUT = 20 * 60  # an idle runner's VM boots and registers; then it takes the job
FINISH_MARGIN = 10 * 60  # after the job's sleep: runner start-up, GitHub's bookkeeping
POLL = 15.0  # seconds between two reads of GitHub and show-scalesets
RETRIES = 3  # a GitHub read failing with 5xx or no answer is tried again, this often


@dataclass(frozen=True)
class Repository:
    """The repository holding the workflow, and the token that may dispatch it."""

    owner: str
    name: str
    token: str = field(repr=False)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """GitHub's JSON answer (None when it has no body); an error names path and status.

        The token goes in the Authorization header only: never in a message or a URL.
        """
        url = f"{API}/repos/{self.owner}/{self.name}{path}"
        request = urllib.request.Request(
            url,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={
                "Accept": "application/vnd.github+json",
                "Authorization": f"Bearer {self.token}",
                "X-GitHub-Api-Version": "2022-11-28",
                "Content-Type": "application/json",
            },
        )
        for attempt in range(1, RETRIES + 1):
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    raw = answer.read()
                return json.loads(raw) if raw else None
            except urllib.error.HTTPError as exc:
                if exc.code < 500 or attempt == RETRIES:
                    raise AssertionError(f"GitHub {method} {url}: {_refusal(exc)}") from None
            except (urllib.error.URLError, TimeoutError) as exc:
                if attempt == RETRIES:
                    raise AssertionError(f"GitHub {method} {url}: no answer ({exc})") from None
            time.sleep(5 * attempt)
        raise AssertionError("unreachable")  # the loop returns or raises


def _refusal(exc: urllib.error.HTTPError) -> str:
    """``403 Resource not accessible by personal access token``, from GitHub's body."""
    try:
        message = json.loads(exc.read() or b"{}").get("message", "")
    except (json.JSONDecodeError, AttributeError):
        message = ""
    return f"{exc.code} {message or exc.reason}"


def _run_ids(repo: Repository) -> set[int]:
    """The ids of the workflow's latest dispatched runs (newest 100)."""
    path = f"/actions/workflows/{WORKFLOW}/runs?event=workflow_dispatch&per_page=100"
    return {run["id"] for run in repo.call("GET", path)["workflow_runs"]}


def _job(repo: Repository, run_id: int) -> dict[str, Any]:
    """The run's one job (the workflow has one), or {} before GitHub lists it.

    Of the latest attempt: a re-run shows as ``run_attempt`` 2 (``_still_on`` refuses it).
    """
    jobs = repo.call("GET", f"/actions/runs/{run_id}/jobs?filter=latest")["jobs"]
    assert len(jobs) <= 1, f"run {run_id} has {len(jobs)} jobs; the workflow must have one"
    return jobs[0] if jobs else {}


def _summary(job: dict[str, Any]) -> str:
    keys = ("status", "conclusion", "runner_name", "run_attempt", "started_at", "html_url")
    return ", ".join(f"{key}={job.get(key)}" for key in keys)


def _wait(juju: jubilant.Juju, what: str, ready: Callable[[], bool], timeout: float) -> None:
    """Poll ``ready`` until it holds; fail naming ``what`` when ``timeout`` passes first.

    A unit of the test in error fails it at once (``_failed``), whatever ``ready`` says.
    """
    try:
        juju.wait(lambda _: ready(), error=_failed, delay=POLL, timeout=timeout, successes=1)
    except TimeoutError:
        pytest.fail(f"{what}: not within {timeout / 60:.0f} minutes", pytrace=False)


def _generation(juju: jubilant.Juju, name: str) -> dict | None:
    """The generation GARM holds under ``name``, as show-scalesets tells it."""
    return next((g for g in _generations(juju) if g["name"] == name), None)


@pytest.fixture(scope="module")
def deployed_in_cloud(
    garm_charm: Path,
    stub_charm: Path,
    settings: Settings,
    changeover: ChangeoverSettings,
    juju: jubilant.Juju,
) -> Iterator[dict[str, str]]:
    """Both charms deployed and related, one generation serving with one idle runner.

    Afterwards, as test_label_change: the relation is removed and garm left to delete
    the scale set on GitHub (and its runners in the cloud), then garm is removed.
    """
    databag = {
        **_databag(settings),
        "name": NAME,
        "labels": OLD_LABELS,
        "min_idle_runner": "1",
        "max_runner": "2",
        "image_id": changeover.image_id,
        "flavor": changeover.flavor,
        "openstack_auth_url": changeover.openstack_auth_url,
        "openstack_username": changeover.openstack_username,
        "openstack_password": changeover.openstack_password,
        "openstack_project_name": changeover.openstack_project_name,
        "openstack_user_domain_name": changeover.openstack_user_domain_name,
        "openstack_project_domain_name": changeover.openstack_project_domain_name,
        "openstack_region_name": changeover.openstack_region_name,
        "openstack_network": changeover.openstack_network,
    }
    config = {"handover-timeout-minutes": HANDOVER_MINUTES}
    charms = (garm_charm, stub_charm)
    yield from deploy_related(juju, charms, settings, databag, config, expose=True)


@pytest.fixture
def repository(settings: Settings, changeover: ChangeoverSettings) -> Repository:
    return Repository(settings.org, changeover.repo, changeover.token)


def _dispatch(repo: Repository, juju: jubilant.Juju) -> int:
    """Dispatch the workflow on the old labels; the id of the one run it made."""
    before = _run_ids(repo)
    branch = repo.call("GET", "")["default_branch"]
    inputs = {"labels": json.dumps(OLD_LABELS.split(",")), "seconds": str(JOB_SECONDS)}
    repo.call(
        "POST", f"/actions/workflows/{WORKFLOW}/dispatches", {"ref": branch, "inputs": inputs}
    )
    new: set[int] = set()

    def listed() -> bool:
        new.update(_run_ids(repo) - before)
        return bool(new)

    _wait(juju, f"GitHub to list the run of {WORKFLOW} just dispatched", listed, DISPATCH_TIMEOUT)
    assert len(new) == 1, f"runs {sorted(new)} of {WORKFLOW} appeared at once: another dispatch?"
    return new.pop()


def _picked_up(repo: Repository, run_id: int, juju: jubilant.Juju, old: str) -> dict[str, Any]:
    """Wait until the job runs on a runner and the old generation counts it busy."""
    seen: dict[str, Any] = {}

    def running() -> bool:
        job = _job(repo, run_id)
        assert job.get("status") != "completed", f"the job ended before it ran: {_summary(job)}"
        if job.get("status") != "in_progress" or not job.get("runner_name"):
            return False
        seen.update(job)
        generation = _generation(juju, old)
        assert generation is not None, f"the old generation {old} is gone: {_generations(juju)}"
        return generation["busy"] == "1"

    _wait(
        juju,
        f"the job of run {run_id} to run on a runner of {old}, busy 1 in show-scalesets "
        "(does the repository reach the organisation's Default runner group? "
        "does the image boot and reach GARM?)",
        running,
        PICKUP_TIMEOUT,
    )
    # The old generation is the only one: the runner is one of its own.
    assert [g["name"] for g in _generations(juju)] == [old], _generations(juju)
    return dict(seen)


def _still_on(repo: Repository, run_id: int, runner: str) -> dict[str, Any]:
    """The job, checked to be on the runner it started on, in its first attempt."""
    job = _job(repo, run_id)
    assert job.get("runner_name") == runner, f"the job moved from {runner}: {_summary(job)}"
    assert job.get("run_attempt", 1) == 1, f"the run was attempted again: {_summary(job)}"
    return job


def _draining(
    repo: Repository, run_id: int, runner: str, juju: jubilant.Juju, old: str
) -> Callable[[], bool]:
    """The old generation draining its one busy runner, the new one serving the new labels.

    Fails at once when the job ends first (it must outlast this: raise JOB_SECONDS) or
    when the old generation is gone while the job runs.
    """

    def ready() -> bool:
        fleet = _generations(juju)
        job = _still_on(repo, run_id, runner)
        assert job.get("status") != "completed", (
            f"the job ended before its generation {old} was seen draining: {_summary(job)}"
        )
        by_name = {g["name"]: g for g in fleet}
        assert old in by_name, f"{old} is gone while its job runs ({_summary(job)}): {fleet}"
        draining = by_name[old]["phase"] == "draining" and by_name[old]["busy"] == "1"
        new = [g for g in fleet if g["current"] == "yes"]
        return (
            draining
            and len(new) == 1
            and new[0]["name"] != old
            and new[0]["phase"] == "serving"
            and set(new[0]["labels"].split(",")) >= set(NEW_LABELS.split(","))
            and "x64" not in new[0]["labels"].split(",")
        )

    return ready


def _finished(
    repo: Repository, run_id: int, runner: str, juju: jubilant.Juju, old: str
) -> tuple[Callable[[], bool], dict[str, Any]]:
    """Ready once the job is completed; until then the old generation must be listed."""
    seen: dict[str, Any] = {}

    def ready() -> bool:
        fleet = _generations(juju)
        job = _still_on(repo, run_id, runner)
        seen.update(job)
        if job.get("status") == "completed":
            return True
        names = [g["name"] for g in fleet]
        assert old in names, f"{old} was deleted while its job ran ({_summary(job)}): {fleet}"
        return False

    return ready, seen


def test_a_job_started_before_a_label_change_finishes_on_the_old_generation(
    deployed_in_cloud: dict[str, str],
    repository: Repository,
    juju: jubilant.Juju,
):
    _assert_converged(juju)
    old = _serving(juju, deployed_in_cloud)["name"]
    run_id = _dispatch(repository, juju)
    try:
        started = _picked_up(repository, run_id, juju, old)
        runner = started["runner_name"]
        picked_up_at = time.monotonic()

        changed = {**deployed_in_cloud, "labels": NEW_LABELS}
        juju.config(STUB, {"databag": json.dumps(changed)})
        _wait(
            juju,
            f"{old} draining its busy runner {runner} beside a new generation serving "
            f"{NEW_LABELS}",
            _draining(repository, run_id, runner, juju, old),
            CHANGE_TIMEOUT,
        )

        ready, job = _finished(repository, run_id, runner, juju, old)
        left = JOB_SECONDS + FINISH_MARGIN - (time.monotonic() - picked_up_at)
        _wait(juju, f"the job of run {run_id} to end on {runner}", ready, max(left, POLL))
        assert job["conclusion"] == "success", f"the job did not succeed: {_summary(job)}"
    finally:
        _cancel_unfinished(repository, run_id)

    # Only now may the old generation go; the new one serves alone.
    juju.wait(lambda s: _message(s) == SETTLED, error=_failed, timeout=CHANGE_TIMEOUT)
    _assert_converged(juju)
    after = _serving(juju, changed)
    assert after["name"] != old, after


def _cancel_unfinished(repo: Repository, run_id: int) -> None:
    """A run the test gave up on is cancelled, so that it holds no runner for long.

    Best effort, after the test's own outcome: a GitHub error here is printed (pytest
    shows it with the test's output), never raised over the failure that led here.
    """
    try:
        if repo.call("GET", f"/actions/runs/{run_id}").get("status") != "completed":
            repo.call("POST", f"/actions/runs/{run_id}/cancel")
    except AssertionError as exc:
        print(f"could not cancel run {run_id}; cancel it on GitHub: {exc}")

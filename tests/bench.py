"""Cost of a reconcile pass against the GARM double (``tox -e bench``).

For N logical scalesets, measures per pass the requests GARM receives (reads, writes)
and the wall time, with a per-request latency on the double (``GARM_BENCH_LATENCY_MS``,
default 2). Scenarios: ``steady`` (converged: nothing to write) and ``label-change``
(every label of all N changed, no runners), each pass until converged, the reconcile
timer's 30 s between passes. ``changeover-latency`` drives the real charm on a simulated
clock through a label change of one scaleset and reports the seconds until the old
scaleset is observed gone, with hooks as Juju runs them (``update-status`` every 5 min
± 20 %) and with the reconcile timer. Prints one line per measurement, then a table;
``--write`` also keeps the table in docs/benchmarks.md. A benchmark, not a test: it
reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import platform
import time
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from garm_client import GarmClient
from reconciler import reconcile
from spec import Desired, ScalesetSpec, Settings
from tests.clock import FakeClock
from tests.garm_double import GarmDouble

SETTINGS = Settings()
PROVIDER = "garm-configurator-0"
TIMER_INTERVAL = timedelta(seconds=30)  # reconcile-interval's default
UPDATE_STATUS = timedelta(minutes=5)  # Juju's default update-status-hook-interval
DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Measure:
    """One pass: what GARM was asked and how long it took."""

    scenario: str
    n: int
    reads: int
    writes: int
    wall_ms: float

    def line(self) -> str:
        return (
            f"bench {self.scenario} n={self.n} requests={self.reads + self.writes} "
            f"reads={self.reads} writes={self.writes} wall_ms={self.wall_ms:.1f}"
        )


def specs(n: int, labels: tuple[str, ...]) -> Desired:
    return Desired(
        tuple(
            ScalesetSpec(
                source=f"garm-configurator/{i}",
                name=f"s{i}",
                entity_kind="organization",
                entity_name="example-org",
                provider_name=PROVIDER,
                image="image",
                flavor="m1.small",
                os_arch="amd64",
                max_runners=2,
                labels=labels,
            )
            for i in range(n)
        )
    )


def one_pass(garm: GarmDouble, client: GarmClient, desired: Desired, clock, scenario: str, n: int):
    start = len(garm.requests)
    began = time.perf_counter()
    outcome = reconcile(client, desired, clock.now, SETTINGS)
    wall = (time.perf_counter() - began) * 1000
    sent = [r for r in garm.requests[start:] if r.path != "/auth/login"]
    reads = sum(r.method == "GET" for r in sent)
    return outcome, Measure(scenario, n, reads, len(sent) - reads, wall)


def run(n: int, latency: float) -> list[Measure]:
    clock = FakeClock()
    measures = []
    with GarmDouble(clock=clock) as garm:
        garm.add_provider(PROVIDER)
        garm.add_org("example-org")
        client = GarmClient(garm.url, garm.username, garm.password)
        client.login()
        reconcile(client, specs(n, ("linux",)), clock.now, SETTINGS)  # set up, unmeasured
        garm.inject("*", r".*", delay=latency, times=10**9)
        _, steady = one_pass(garm, client, specs(n, ("linux",)), clock, "steady", n)
        measures.append(steady)
        changed = specs(n, ("linux", "x64"))
        for index in range(1, 6):
            clock.advance(TIMER_INTERVAL)  # the generation being replaced is not brand new
            garm.tick()
            outcome, measure = one_pass(garm, client, changed, clock, f"label-change-{index}", n)
            measures.append(measure)
            if not outcome.done and not outcome.progress:
                break
        client.close()
    return measures


@dataclass(frozen=True)
class Latency:
    """How long a label change of one scaleset took, from the change to the old one gone."""

    case: str
    trigger: str
    seconds: int | None

    def line(self) -> str:
        shown = "never" if self.seconds is None else str(self.seconds)
        return f"bench changeover-latency case={self.case} trigger={self.trigger} seconds={shown}"


def changeover_latency(case: str, trigger: str, seed: int = 7) -> Latency:
    """Drive the charm through one label change on a simulated clock; see the docstring.

    ``case`` is ``idle`` (min-idle 0, no runner) or ``busy`` (one runner whose job ends
    60 s after the change). GARM's workers tick every 5 s; ``update-status`` comes every
    5 minutes ± 20 % (seeded); with ``trigger=timer`` the reconcile timer also fires every
    30 s. Returns when the charm has seen the old scaleset gone (its delete confirmed).
    """
    import random

    from ops import testing
    from scenario import _consistency_checker

    from charm import GarmCharm
    from tests.juju_events import reconcile_tick
    from tests.sandbox import charm_state, sandboxed_machine

    _consistency_checker.logger.setLevel(logging.ERROR)  # reconcile-tick is the charm's
    rng = random.Random(seed)
    clock = FakeClock()
    unit = {
        "name": "ci",
        "provider_name": PROVIDER,
        "image_id": "image",
        "flavor": "m1.small",
        "os_arch": "amd64",
        "max_runner": "2",
        "labels": "linux,x64",
        "org": "example-org",
    }
    with sandboxed_machine(clock) as root, GarmDouble(clock=clock) as garm:
        garm.add_org("example-org")
        garm.add_provider(PROVIDER)
        relation = testing.Relation(
            "garm-configurator", remote_app_name="garm-configurator", remote_units_data={0: unit}
        )
        ctx = testing.Context(GarmCharm)
        state = ctx.run(ctx.on.update_status(), charm_state(garm, root, relation))
        clock.advance(timedelta(minutes=10))  # long settled
        (old,) = garm.scalesets()
        busy = garm.add_runner(old["id"], runner_status="active") if case == "busy" else None
        changed = dataclasses.replace(
            relation, remote_units_data={0: {**unit, "labels": "linux,arm64"}}
        )
        state = dataclasses.replace(state, relations=[changed])
        state = ctx.run(ctx.on.relation_changed(changed, remote_unit=0), state)
        start = clock.now
        next_status = UPDATE_STATUS.total_seconds() * rng.uniform(0.8, 1.2)
        for second in range(1, 3600):
            clock.now = start + timedelta(seconds=second)
            if second % 5 == 0:
                garm.tick()
            if busy and second == 60:
                garm.finish_job(busy)
            events = []
            if second >= next_status:
                events.append(ctx.on.update_status())
                next_status = second + UPDATE_STATUS.total_seconds() * rng.uniform(0.8, 1.2)
            if trigger == "timer" and second % TIMER_INTERVAL.seconds == 0:
                events.append(reconcile_tick())
            for event in events:
                state = ctx.run(event, state)
                if all(s["id"] != old["id"] for s in garm.scalesets()):
                    return Latency(case, trigger, second)
    return Latency(case, trigger, None)


def hook_ms(n: int, repeats: int = 20) -> tuple[float, float]:
    """Wall and CPU ms of an ``update-status`` hook with nothing to do (ops.testing).

    The charm runs in this process with its machine sandboxed as in the unit tests; the
    GARM double runs in this process too, so the CPU figure includes its side.
    """
    from ops import testing

    from charm import GarmCharm
    from tests.sandbox import charm_state, sandboxed_machine

    clock = FakeClock()
    with sandboxed_machine(clock) as root, GarmDouble(clock=clock) as garm:
        garm.add_org("example-org")
        units = {}
        for i in range(n):
            garm.add_provider(f"garm-configurator-{i}")
            units[i] = {
                "name": f"s{i}",
                "provider_name": f"garm-configurator-{i}",
                "image_id": "image",
                "flavor": "m1.small",
                "os_arch": "amd64",
                "max_runner": "2",
                "labels": "linux",
                "org": "example-org",
            }
        relation = testing.Relation(
            "garm-configurator", remote_app_name="garm-configurator", remote_units_data=units
        )
        ctx = testing.Context(GarmCharm)
        state = ctx.run(ctx.on.update_status(), charm_state(garm, root, relation))  # converge
        wall = cpu = 0.0
        for _ in range(repeats):
            began, began_cpu = time.perf_counter(), time.process_time()
            ctx.run(ctx.on.update_status(), state)
            wall += time.perf_counter() - began
            cpu += time.process_time() - began_cpu
    return wall * 1000 / repeats, cpu * 1000 / repeats


def table(measures: list[Measure], latency_ms: float) -> str:
    rows = [
        "| scenario | n | requests | reads | writes | wall ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {m.scenario} | {m.n} | {m.reads + m.writes} | {m.reads} | {m.writes} "
            f"| {m.wall_ms:.1f} |"
            for m in measures
        ),
    ]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    return (
        "# Benchmarks\n\n"
        "Cost of one reconcile pass against the GARM double over loopback HTTP, "
        f"{latency_ms:g} ms added per request. Measured with `tox -e bench` on {machine}.\n"
        "`label-change-K` is the K-th pass after the labels of all N scalesets changed "
        "(no runners), 30 s apart as the reconcile timer runs them: the first creates every "
        "new generation; the second, once they listen, retires and deletes every old one "
        "(each delete confirmed by one read, since GARM answers 200 even when GitHub "
        "refuses); the third sees them gone and writes nothing.\n\n"
        "Targets (issue #5): a settled pass ≤ 6 requests and 0 writes at every N; a "
        "label-change pass ≤ 6 reads plus what its phase needs; under 0.5 s per pass "
        "at N = 1000. The settled and confirming passes meet all three. A pass that "
        "changes all 1000 scalesets at once is bound by its 1000-3000 calls at 2 ms each, "
        "not by the charm; a hook's pass budget (60 s) covers it, and a slower GARM is "
        "picked up by the next timer pass.\n\n" + "\n".join(rows) + "\n"
    )


def latency_table(latencies: list[Latency]) -> str:
    """The changeover-latency figures and their targets (issue #10)."""
    rows = "\n".join(
        f"| {x.case} | {x.trigger} | {'never' if x.seconds is None else x.seconds} |"
        for x in latencies
    )
    return (
        "\n## Changeover latency\n\n"
        "Seconds from a label change of one scaleset to the charm seeing the old scaleset "
        "gone, the real charm through ops.testing on a simulated clock, against the double "
        "playing GARM's pace (listener 4.5 s after create, runners report before idle, a job "
        "ending on a retired scaleset seen only at GARM's 5-minute check). `idle`: "
        "min-idle 0, no runner. `busy`: one runner whose job ends 60 s after the change. "
        "`update-status`: hooks only, every 5 min ± 20 % (seeded). `timer`: the reconcile "
        "timer every 30 s as well. Targets with the timer: idle ≤ 60 s; busy ≤ 60 s + "
        "5 min + 2 x 30 s = 420 s.\n\n"
        "| case | trigger | seconds |\n| --- | --- | ---: |\n" + rows + "\n"
    )


def main() -> None:
    """Measure, print, and with ``--write`` keep the table in docs/benchmarks.md."""
    # dpcharmlibs-interfaces' models warn at import under pydantic >= 2.12; harmless.
    warnings.filterwarnings("ignore", message=".*has no effect in the context it was used")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="*", default=[10, 100, 1000])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    latency_ms = float(os.environ.get("GARM_BENCH_LATENCY_MS", "2"))
    measures = []
    for n in args.n:
        for measure in run(n, latency_ms / 1000):
            print(measure.line(), flush=True)
            measures.append(measure)
    wall, cpu = hook_ms(10)
    print(f"bench update-status-hook n=10 wall_ms={wall:.1f} cpu_ms={cpu:.1f}")
    latencies = [
        changeover_latency(case, trigger)
        for case in ("idle", "busy")
        for trigger in ("update-status", "timer")
    ]
    for latency in latencies:
        print(latency.line(), flush=True)
    text = (
        table(measures, latency_ms)
        + (
            f"\nAn `update-status` hook with nothing to do (10 scalesets, the charm "
            f"in-process through ops.testing, no added latency): {wall:.1f} ms wall, "
            f"{cpu:.1f} ms CPU (the CPU figure includes the in-process GARM double).\n"
        )
        + latency_table(latencies)
    )
    print(text)
    if args.write:
        DOCS.write_text(text)


if __name__ == "__main__":
    main()

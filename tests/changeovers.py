"""Label changes brought to a given phase through whole passes against the GARM double."""

from __future__ import annotations

from scalesets.planner import LISTENER_STARTUP
from scalesets.spec import ScalesetSpec
from tests.garm_double import GarmDouble
from tests.passes import Passes
from tests.specs import make_spec


def retired_with_a_busy_runner(passes: Passes, garm: GarmDouble) -> tuple[dict, str, ScalesetSpec]:
    """A label change under way: the old generation retired, one job still running on it.

    Returns the old scaleset as GARM listed it, its busy runner, and the new spec;
    ``passes.outcome`` is then the outcome of the pass that retired it.
    """
    passes.run(make_spec())
    (old,) = garm.scalesets()
    passes.later()  # the serving generation is not brand new
    busy = garm.add_runner(old["id"], runner_status="active")
    new_spec = make_spec(labels=("linux", "arm64"))
    passes.run(new_spec)
    passes.later(LISTENER_STARTUP)  # the new one listens: the old one is retired
    passes.run(new_spec)
    return old, busy, new_spec


def new_one_listening(passes: Passes) -> ScalesetSpec:
    """A label change whose new generation now listens: the next pass retires the old one.

    Returns the new spec; nothing runs on the old generation.
    """
    passes.run(make_spec())
    passes.later()  # the serving generation is not brand new
    new_spec = make_spec(labels=("linux", "arm64"))
    passes.run(new_spec)
    passes.later(LISTENER_STARTUP)
    return new_spec

"""The charm in-process on a sandboxed machine, for the demo and the benchmark.

As in the unit tests: GARM's files go under a temporary root, systemctl and useradd are
answered by fakes, and GARM itself is the double on loopback.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from charmlibs import passwd
from ops import testing

from charm import GarmCharm
from garm import workload
from tests.binaries import fake_garm, fake_provider
from tests.charm_states import INTERNAL_SECRET, admin_secret
from tests.garm_double import GarmDouble
from tests.machine import FakeSystemctl


@contextlib.contextmanager
def sandboxed_machine(clock: Callable[[], datetime]) -> Iterator[Path]:
    """Point the charm at a temporary root, and at ``clock``, while the block runs.

    The charm reads the same clock as the GARM double, as it reads its machine's.
    """
    root = Path(tempfile.mkdtemp())
    saved = (GarmCharm.paths, GarmCharm.service_user, passwd.add_user, subprocess.run)
    saved_clock = GarmCharm.__dict__["now"]  # the staticmethod itself, not its function
    setattr(GarmCharm, "now", staticmethod(clock))  # noqa: B010 (restored as it was)
    GarmCharm.paths = workload.Paths(root / "machine")
    GarmCharm.service_user = pwd.getpwuid(os.getuid()).pw_name
    passwd.add_user = lambda *_, **__: None  # type: ignore[assignment]
    subprocess.run = FakeSystemctl(clock)  # type: ignore[assignment]
    try:
        yield root
    finally:
        GarmCharm.paths, GarmCharm.service_user, passwd.add_user, subprocess.run = saved
        setattr(GarmCharm, "now", saved_clock)  # noqa: B010 (the staticmethod, as it was)
        shutil.rmtree(root)


def charm_state(garm: GarmDouble, root: Path, *relations: testing.Relation) -> testing.State:
    """A leader unit with its resources attached, its secrets made, pointed at ``garm``."""
    resources = [
        testing.Resource(name="garm", path=fake_garm(root / "garm")),
        testing.Resource(
            name="garm-provider-openstack", path=fake_provider(root / "garm-provider-openstack")
        ),
    ]
    return testing.State(
        leader=True,
        config={"api-port": int(garm.url.rsplit(":", 1)[1])},
        relations=relations,
        secrets=[admin_secret(garm), INTERNAL_SECRET],
        resources=resources,
    )

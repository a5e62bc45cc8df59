"""Every hook starts by importing the charm: nothing may be printed then (issue #11)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_charm_warns_of_nothing():
    # As dispatch runs it: a fresh interpreter, src and lib on the path, every warning
    # turned into an error so that one printed at import fails here.
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'lib'}"}
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import charm"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""

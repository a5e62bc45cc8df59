"""The machine's edge for tests: systemctl answered by a fake that knows GARM's unit."""

from __future__ import annotations

import subprocess
from typing import Any


class FakeSystemctl:
    """Stands in for subprocess.run; answers only the systemctl calls it knows."""

    KNOWN = (
        ["daemon-reload"],
        ["enable", "garm.service"],
        ["restart", "garm"],
        ["disable", "garm.service"],
        ["stop", "garm"],
        ["--quiet", "is-active", "garm"],
    )

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.failing: set[str] = set()
        self.active = True

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert cmd[0] == "systemctl" and cmd[1:] in self.KNOWN, f"unexpected command {cmd}"
        self.calls.append(cmd[1:])
        failed = cmd[1] in self.failing or (cmd[-2] == "is-active" and not self.active)
        if failed and kwargs.get("check"):
            raise subprocess.CalledProcessError(1, cmd, "", "failed")
        return subprocess.CompletedProcess(cmd, 3 if failed else 0, "", "")

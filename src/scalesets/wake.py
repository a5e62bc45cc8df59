"""When a plan can next make progress: the moments it waits on, gathered as it decides.

Beside each decision that waits on time, the moment it flips (``due``); beside each wait
on GARM to do something soon without saying when (a runner to report idle, a retired
scale set's runners to go), a look soon (``expected``). ``Plan.wake`` is the earliest;
the leader asks for one extra pass then (``garm.requeue``, docs/adr/0011).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

# How soon to look again at what GARM is expected to do without telling when: a tenth of
# how long it has been awaited, within these bounds, so a runner that boots in half a
# minute (or a scale-down) is seen within seconds, and what takes long costs few reads.
SOON_FIRST = timedelta(seconds=3)
SOON_LONGEST = timedelta(minutes=1)


@dataclass
class Wake:
    """The moments one plan waits on, as the planner walks the families.

    Those of a generation becoming live (``live``) count only while a changeover waits on
    one: a new scale set with nothing to hand over from has nothing to do then.
    """

    now: datetime
    moments: list[datetime] = field(default_factory=list)
    live_moments: list[datetime] = field(default_factory=list)

    def due(self, at: datetime, *, live: bool = False) -> None:
        """Something the plan waits on is due at ``at`` (at once, when that has passed)."""
        (self.live_moments if live else self.moments).append(max(at, self.now))

    def expected(self, since: datetime, *, live: bool = False) -> None:
        """GARM is expected to do something soon, awaited since ``since``, without a moment."""
        waited = max(self.now - since, timedelta(0))
        self.due(self.now + min(max(waited / 10, SOON_FIRST), SOON_LONGEST), live=live)

    def earliest(self, changing: bool) -> datetime | None:
        """The first moment the plan waits on; ``changing``: a changeover is under way."""
        return min([*self.moments, *(self.live_moments if changing else ())], default=None)

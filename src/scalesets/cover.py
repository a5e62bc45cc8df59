"""Whether live scalesets serve what a leaving one is still asked for: the hand-over rule.

A label change, or any retirement, may take away a scaleset only once every job the
current specs send it has a live scaleset that takes it, with all the labels that job
asks for; the planner asks ``Cover.covers`` before it retires one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from garm.models import ScaleSet
from scalesets.naming import normalise_labels, spec_key
from scalesets.spec import ScalesetSpec

EntityKey = tuple[str, str]


def _entity_of(scaleset: ScaleSet) -> EntityKey:
    return (scaleset.entity_kind or "", scaleset.entity_name.lower())


def _served_by(scaleset: ScaleSet) -> frozenset[str]:
    """The labels jobs can target a scaleset by: its tags and, as GARM sends it, its name."""
    return frozenset(normalise_labels((*scaleset.labels, scaleset.name)))


def _serves(runners: EntityKey, jobs: EntityKey) -> bool:
    """Whether runners registered at ``runners`` take jobs of ``jobs``.

    A repository's jobs run on its own runners and on its owner organisation's.
    """
    (runner_kind, runner_name), (job_kind, job_name) = runners, jobs
    return runners == jobs or (
        runner_kind == "organization"
        and job_kind == "repository"
        and job_name.partition("/")[0] == runner_name
    )


@dataclass(frozen=True)
class Cover:
    """What current specs ask for and what live current generations serve.

    ``asked``: per current spec, its org/repo and the labels its jobs use. ``live``: per
    live current generation, its org/repo and the labels it serves.
    """

    asked: tuple[tuple[EntityKey, frozenset[str]], ...]
    live: tuple[tuple[EntityKey, frozenset[str]], ...]

    @classmethod
    def of(cls, specs: Iterable[ScalesetSpec], live: Iterable[ScaleSet]) -> Cover:
        """What ``specs`` ask for, and what the ``live`` current generations serve."""
        return cls(
            tuple(
                ((s.entity_kind, s.entity_name.lower()), frozenset(spec_key(s).labels))
                for s in specs
            ),
            tuple((_entity_of(c), _served_by(c)) for c in live),
        )

    def covers(self, leaving: ScaleSet) -> bool:
        """Whether what current specs ask of a leaving scaleset live scalesets serve.

        A job needs one runner with all its labels: for each current spec whose jobs the
        leaving scaleset takes, the labels they share must all be on one live scaleset
        that takes those jobs too. What nobody asks for goes at once.
        """
        entity, labels = _entity_of(leaving), _served_by(leaving)
        needs = {
            # The jobs both take: the repository's, when either side is one.
            (entity if entity[0] == "repository" else jobs, shared)
            for jobs, asked in self.asked
            if (_serves(entity, jobs) or _serves(jobs, entity)) and (shared := labels & asked)
        }
        return all(
            any(_serves(runners, jobs) and shared <= served for runners, served in self.live)
            for jobs, shared in needs
        )

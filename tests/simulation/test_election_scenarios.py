"""Leader election in scripted simulated histories: cases too narrow for random faults to
reach, checked by the same checker (tokens never repeat across members, never go down)."""

from __future__ import annotations

from coordination._protocol import messages as m
from coordination.testing.simulation import History, HistorySettings
from devtools.simulation.election import ElectionDriver

# Past the broker's check for expired groups (every 600 s): an empty group without
# committed offsets is dropped there, and its generations start over.
AWAY_S = 700.0


class LostFirstCommitThenEveryoneAway(History):
    """The group's first elected member cannot store its token (its commits are lost);
    then every member dies, the broker drops the empty group, and the members come back."""

    def _run(self) -> None:
        s = self.scheduler
        s.probes.append(lambda: self.driver.check(s.now))
        commits_lost = True
        self.cluster.lose = lambda request: (
            commits_lost and isinstance(request, m.OffsetCommitRequest)
        )
        for host in self.hosts:
            self._start(host)
        s.run(s.now + 20.0)  # the first election, and its commits lost
        for host in self.hosts:
            if host.process is not None:
                s.kill(host.process)
        commits_lost = False
        s.run(s.now + AWAY_S)
        model = self.cluster.coordinator_model()
        assert model is not None and not model._classic.groups, "the broker kept the empty group"
        for host in self.hosts:
            self._start(host)
        self._settle()


def test_a_first_leadership_never_stored_does_not_get_its_token_again_after_a_cleanup() -> None:
    # The group's first elected member stores its token before it leads. Were it to lead
    # first, a lost commit would leave no trace of its token: once every member is gone
    # and the broker drops the group, generations start over and the next leader would
    # act with the same token (which the checker reports).
    for seed in range(5):
        result = LostFirstCommitThenEveryoneAway(
            ElectionDriver, seed, HistorySettings(faults=0)
        ).run()
        assert result.ok, (seed, result.violation, result.trace[-30:])
        assert result.settle_s is not None

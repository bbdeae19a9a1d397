"""The engine in scripted simulated histories: cases too narrow for random faults to reach,
checked by the engine's checker (no shard held by two living members, each with a lease)."""

from __future__ import annotations

from coordination.testing.simulation import History, HistorySettings
from coordination.testing.simulation._network import NetworkSettings
from examples.shards_simulation import ShardsDriver

CUT_OFF_S = 8.0  # longer than the lease, min(session 6 s, rebalance 10 s)
LOAD_S = 5.0  # how long the new coordinator loads the group


class ReplacedStaticMemberProvesItsPlaceAgain(History):
    """Static member P1 is cut off from the brokers; a restart of it, P2 (same instance id),
    takes its place. Just before P1 is back the coordinator moves, and the new one, still
    loading the group, answers P1's first heartbeat NONE (Kafka answers blindly while it
    loads). P1's lease ran out, so it proves its place again by rejoining (its
    ``on_join_prepare`` is slow, so its JoinGroup reaches the loaded coordinator at once),
    and takes the place back from P2, whose lease still holds."""

    def _run(self) -> None:
        s = self.scheduler
        s.probes.append(lambda: self.driver.check(s.now))
        self.cluster.network = NetworkSettings(load_time_s=(LOAD_S, LOAD_S))
        for host in self.hosts:
            host.static = True
            self._start(host)
        s.run(s.now + 10.0)
        first = self.hosts[0]
        cut_off_at = s.now
        self._transports[first.index].isolated_until = cut_off_at + CUT_OFF_S
        s.run(cut_off_at + 1.0)
        self._start(first)  # P2; P1 runs on, cut off
        s.run(cut_off_at + CUT_OFF_S - 0.1)
        self.cluster.move_coordinator()
        self.driver.slow(first, LOAD_S / 2)  # P1's next callback: its re-proof's prepare
        self._settle()


def test_a_static_member_proving_its_place_again_waits_out_whoever_it_replaced() -> None:
    for seed in range(5):
        result = ReplacedStaticMemberProvesItsPlaceAgain(
            ShardsDriver, seed, HistorySettings(faults=0), log_to_trace=True
        ).run()
        assert result.ok, (seed, result.violation, "\n".join(result.trace[-60:]))
        assert result.settle_s is not None

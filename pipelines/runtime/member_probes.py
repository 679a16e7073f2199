"""The answers of a member's health probes (``/healthz``, ``/readyz``), from its state. Pure
reads: a probe never waits for a lock, a broker or a batch."""
from __future__ import annotations

from collections.abc import Callable

from groupmgr.generation import MemberState
from pipelines.runtime.metrics import Probe
from pipelines.runtime.owned_partitions import OwnedPartitions
from pipelines.runtime.query_supervisor import QueryState, QuerySupervisor


class MemberProbes:
    """``member``: the group member (its ``state``); ``joined()``: an assignment has arrived;
    ``query_running()``: the member's Spark query exists."""

    def __init__(self, supervisor: QuerySupervisor, member, owned: OwnedPartitions,
                 joined: Callable[[], bool], query_running: Callable[[], bool]):
        self._supervisor, self._member, self._owned = supervisor, member, owned
        self._joined, self._query_running = joined, query_running

    def healthy(self) -> Probe:
        """Alive: the member's thread runs and no failure ended the member."""
        if self._supervisor.state is QueryState.FAILED:
            return Probe(False, "a failure a person must fix ends the member")
        state = getattr(self._member, "state", None)
        if state in (MemberState.FAILED, MemberState.CLOSED):
            return Probe(False, f"the group member is {state.value}")
        return Probe(True, f"member {getattr(state, 'value', 'starting')}, query {self._supervisor.state.value}")

    def ready(self) -> Probe:
        """Ready: joined, and the query reads every owned partition that can run, or none is owned."""
        if not self._joined():
            return Probe(False, "not joined yet (warming up or joining the group)")
        owned, state = self._owned.partitions, self._supervisor.state
        if not owned:
            return Probe(True, "joined; no partition assigned")
        if state is QueryState.RUNNING and self._query_running():
            return Probe(True, f"reading {len(owned) - len(self._owned.stopped)} of {len(owned)} partition(s)")
        return Probe(False, f"query {state.value}")

"""``GroupMember``: one member of a Kafka consumer group (classic protocol, eager or cooperative).

``start()`` spawns one background thread that joins the group, then heartbeats every interval
(and a short-lived one that opens the connection offsets use: OffsetCommit and OffsetFetch go over
a connection of their own, so they never queue behind this member's pending JoinGroup).
The rebalance protocol (``protocol``) follows from the configured assignors as in Kafka: cooperative
when every one supports it (``cooperative-sticky``), else eager.

Eager: on REBALANCE_IN_PROGRESS it calls ``listener.on_revoked(owned)`` (the generation stays valid
meanwhile, so the caller may commit final offsets), rejoins, and calls
``listener.on_assigned(generation, partitions)``.

Cooperative (KIP-429): on REBALANCE_IN_PROGRESS it rejoins *keeping* its partitions (no callback;
commits keep using the last stable generation, which the broker accepts until the new generation
forms) and reports them as owned in its subscription. After the join it calls
``on_revoked(owned - assigned)`` only when that is non-empty, then
``on_assigned(generation, partitions)`` with the full assignment, and, if something was revoked,
rejoins once more so the leader can give those partitions to their new owners.

When fenced (ILLEGAL_GENERATION or
UNKNOWN_MEMBER_ID on heartbeat or commit) it first invalidates the generation, then calls
``on_fenced(error)`` and ``on_revoked(partitions)`` (they are lost), and rejoins.
FENCED_INSTANCE_ID (another process took this ``group_instance_id``) is fatal, as in Java.
Without a heartbeat answer for a session timeout the coordinator is re-discovered (as in Java);
the partitions are kept until the broker says the generation is gone.

The application calls ``poll()`` while it makes progress (Kafka's ``max.poll.interval.ms``): when a
generation goes ``max_poll_interval_ms`` without one, the member leaves the group (LeaveGroup for
dynamic members; a static member only gives its generation up, as in Java), calls
``on_fenced(PollTimeoutExpired)`` and ``on_revoked(lost)``, stops heartbeating and waits in
``MemberState.POLL_TIMEOUT``; the next ``poll()`` makes it rejoin. This is not a failure.

Listener callbacks run one at a time, in order, on a listener thread; the member thread keeps
heartbeating while it waits for them, for at most the rebalance timeout. A fatal error is recorded
and re-raised to the caller by ``raise_if_failed()`` (Kafka's heartbeat-thread pattern).
Every wait is bounded. Public methods are thread-safe.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable, Mapping

from groupmgr.assignors import Subscription, TopicPartition
from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport, LazilyStartedClient, Transport
from groupmgr.group_errors import MemberClosedError, StaleGenerationError
from groupmgr.generation import Generation, MemberState
from groupmgr.listener import ListenerDispatcher, RebalanceListener
from groupmgr.member_config import MemberConfig
from groupmgr.member_loop import ENDED, MemberLoop, MemberStatus
from groupmgr.offsets import OffsetAndMetadata, commit_offsets, fetch_all_offsets, fetch_offsets

__all__ = ["GroupMember", "MemberConfig", "RebalanceListener"]
log = logging.getLogger(__name__)


class GroupMember:
    """A consumer-group member driven by one background thread. Public methods are thread-safe."""

    def __init__(self, config: MemberConfig, listener: RebalanceListener, *,
                 transport: Transport | None = None, offsets_transport: Transport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``transport``: how the group protocol reaches the brokers (JoinGroup, SyncGroup,
        Heartbeat, LeaveGroup); ``offsets_transport``: how offsets do (OffsetCommit, OffsetFetch).
        By default each is its own connection to the coordinator (see :meth:`_offsets`); a test that
        passes only ``transport`` has both go through it."""
        self.config = config
        if offsets_transport is None:
            offsets_transport = transport or self._new_transport(config)
        transport = transport or self._new_transport(config)
        self._client = self._coordinator_client(transport, config, clock)
        # None: offsets share the protocol's client (its transport is started by the member thread)
        self._offsets_client = None if offsets_transport is transport else \
            LazilyStartedClient(self._coordinator_client(offsets_transport, config, clock))
        self._status = MemberStatus(leave_on_close=config.group_instance_id is None, topics=config.topics)
        dispatcher = ListenerDispatcher(listener, config.group_id, config.rebalance_timeout_ms / 1000, clock)
        self._loop = MemberLoop(config, self._client, self._status, dispatcher, clock)
        self._thread: threading.Thread | None = None

    @staticmethod
    def _new_transport(config: MemberConfig) -> Transport:
        return KafkaTransport(config.bootstrap_servers, config.client_id, config.client_kwargs)

    @staticmethod
    def _coordinator_client(transport: Transport, config: MemberConfig, clock) -> CoordinatorClient:
        return CoordinatorClient(transport, config.group_id, request_timeout_ms=config.request_timeout_ms,
                                 retry_backoff_ms=config.retry_backoff_ms,
                                 retry_backoff_max_ms=config.retry_backoff_max_ms, clock=clock)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> "GroupMember":
        """Spawn the member thread (joins, then heartbeats). Returns self; call once."""
        with self._status.cond:
            if self._thread is not None or self._status.state in ENDED or self._status.stopping.is_set():
                raise MemberClosedError("start() may be called once, before close()")
            self._thread = threading.Thread(target=self._loop.run, name=f"scg-member-{self.config.group_id}",
                                            daemon=True)
            self._thread.start()
        if self._offsets_client is not None:
            threading.Thread(target=self._open_offsets_connection, name=f"scg-offsets-{self.config.group_id}",
                             daemon=True).start()
        return self

    def close(self, leave_group: bool | None = None, timeout_s: float = 30.0) -> None:
        """Revoke owned partitions (on_revoked), leave the group, stop the thread. Bounded by ``timeout_s``.

        ``leave_group`` defaults to True for dynamic members and False for static ones (a static
        member keeps its place until its session times out, as in Java). Idempotent.
        """
        if leave_group is not None:
            self._status.update(leave_on_close=leave_group)
        self._stop_thread(timeout_s)
        self._close_offsets_client()

    def poll(self) -> None:
        """The application is alive and making progress: restart the poll timer.

        Call it from the application's main loop more often than ``max_poll_interval_ms`` (e.g.
        every 0.5 s); do not call it from listener callbacks' own progress. Thread-safe and cheap
        (a short lock, no I/O, never blocks on the network or the listener). After a poll timeout
        (state ``POLL_TIMEOUT``) it makes the member thread rejoin (``on_assigned`` follows); the
        poll timer of the new generation starts when it is installed. Harmless before ``start()``
        and after ``close()``.
        """
        self._loop.poll()

    def _abandon(self, timeout_s: float = 10.0) -> None:
        """Test hook: stop heartbeating and drop connections, no callbacks, no LeaveGroup (a crash)."""
        self._status.update(abandon=True)
        self._stop_thread(timeout_s)
        self._close_offsets_client()

    def _stop_thread(self, timeout_s: float) -> None:
        with self._status.cond:
            thread = self._thread
            self._status.stopping.set()
            self._status.wakeup.set()
            if thread is None and self._status.state not in ENDED:
                self._status.state = MemberState.CLOSED
                self._status.cond.notify_all()
        if thread is None:
            return
        thread.join(timeout_s / 2)
        if thread.is_alive():  # blocked in a long request (a JoinGroup): closing the client unblocks it
            self._client.close()
            thread.join(timeout_s / 2)

    # -- state ---------------------------------------------------------------------------------
    @property
    def state(self) -> MemberState:
        with self._status.cond:
            return self._status.state

    @property
    def protocol(self) -> str:
        """This member's rebalance protocol, ``"eager"`` or ``"cooperative"`` (from the assignors)."""
        return self._loop.protocol

    @property
    def generation(self) -> Generation:
        """The generation commits are made with; NO_GENERATION while fenced or closed, and while
        (re)joining in the eager protocol (a cooperative member keeps its last stable generation
        while it rejoins)."""
        with self._status.cond:
            return self._status.commit_generation

    @property
    def assignment(self) -> tuple[TopicPartition, ...]:
        """Partitions owned now, sorted (eager: empty while rebalancing; cooperative: kept)."""
        with self._status.cond:
            return self._status.assignment

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics this member subscribes to now (with ``topic_pattern``: the latest match)."""
        with self._status.cond:
            return self._status.topics

    @property
    def is_leader(self) -> bool:
        """True when this member computed the current generation's assignment."""
        with self._status.cond:
            leader = self._status.leader
            return leader is not None and leader.generation == self._status.generation

    @property
    def group_subscriptions(self) -> Mapping[str, Subscription]:
        """Leader only: every member's decoded subscription in the current generation (else empty)."""
        with self._status.cond:
            leader = self._status.leader
            return dict(leader.subscriptions) if leader and leader.generation == self._status.generation else {}

    def raise_if_failed(self) -> None:
        """Re-raise the background thread's fatal error, if any."""
        with self._status.cond:
            if self._status.failure is not None:
                raise self._status.failure

    def wait_until_stable(self, timeout_s: float) -> bool:
        """Wait (bounded) until STABLE (on_assigned has returned); False on timeout.

        Raises the fatal error if the member failed, MemberClosedError if it was closed.
        """
        status = self._status
        with status.cond:
            status.cond.wait_for(lambda: status.state in (MemberState.STABLE, *ENDED), timeout_s)
            self.raise_if_failed()
            if status.state is MemberState.CLOSED:
                raise MemberClosedError(f"member of group {self.config.group_id} is closed")
            return status.state is MemberState.STABLE

    # -- offsets -------------------------------------------------------------------------------
    def commit_offsets(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], metadata: str = "",
                       timeout_s: float | None = None) -> None:
        """Commit next-offsets-to-read (ints or OffsetAndMetadata) with the current generation
        (``generation``; during a cooperative rejoin the last stable one).

        Raises StaleGenerationError when there is no current generation or the broker rejects it;
        a fenced answer for the current generation also makes the member thread run
        on_fenced/on_revoked and rejoin (during a cooperative rejoin the join round's answer decides
        instead: the broker refuses the old generation once the new one has formed).
        """
        generation = self._usable_generation()
        values = {TopicPartition(*tp): v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v, metadata)
                  for tp, v in offsets.items()}
        timeout_s = timeout_s or self.config.request_timeout_ms / 1000
        try:
            commit_offsets(self._offsets(timeout_s), self.config.group_id, generation, self.config.group_instance_id,
                           values, timeout_s)
        except StaleGenerationError as exc:
            self._after_stale_commit(generation, exc)
            raise

    def committed(self, partitions: Iterable[TopicPartition],
                  timeout_s: float | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets (next to read) of ``partitions``; partitions without one are absent."""
        self._check_running()
        timeout_s = timeout_s or self.config.request_timeout_ms / 1000
        return fetch_offsets(self._offsets(timeout_s), self.config.group_id, partitions, timeout_s)

    def group_offsets(self, timeout_s: float | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of the group, whoever committed it (OffsetFetch for all
        partitions, without ``require_stable``: a pending transactional commit gives the last
        stable offset), metadata exact. Usable before :meth:`start` (e.g. to judge the group's
        backlog before joining): it opens the offsets' own connection, which the member then uses
        (a member whose offsets share the protocol's transport, as some tests build it, can fetch
        only once started). Opening it and fetching take about ``timeout_s`` together, at most
        twice that. Raises MemberClosedError after :meth:`close`."""
        self._check_running()
        timeout_s = timeout_s or self.config.request_timeout_ms / 1000
        deadline = self._client.deadline(timeout_s)  # the offsets' client has the same clock
        client = self._offsets(timeout_s)
        return fetch_all_offsets(client, self.config.group_id, max(0.001, deadline - client.deadline(0)))

    def _offsets(self, timeout_s: float) -> CoordinatorClient:
        """The client offset requests go through: its own connection to the coordinator, opened
        while the member joins (:meth:`_open_offsets_connection`) or at the first request. A
        broker answers one connection's requests in order, and a JoinGroup is answered only once
        every member of the group has rejoined (up to the rebalance timeout), so on the protocol's
        connection a commit made while this member rejoins would wait for the whole rebalance and
        then be refused for its generation; on its own, a commit made while the group prepares
        the rebalance is stored at once with the member's generation, as Kafka accepts (measured
        on loopback, a commit during a join: 0.48 s and refused on the shared connection, 5 ms
        and stored on its own)."""
        return self._client if self._offsets_client is None else self._offsets_client.get(timeout_s)

    def _open_offsets_connection(self) -> None:
        """Open the offsets' connection while the member joins, so the first offset request
        (the committed offsets of its first assignment) does not wait for a bootstrap, TLS and
        SASL handshakes and FindCoordinator. Best effort: a failure is retried at that request."""
        timeout_s = self.config.request_timeout_ms / 1000
        try:
            client = self._offsets(timeout_s)
            client.ensure_coordinator(client.deadline(timeout_s))
        except Exception as exc:  # noqa: BLE001 - the first offset request opens it again
            log.debug("group %s: opening the offsets connection: %s", self.config.group_id, exc)

    def _close_offsets_client(self) -> None:
        """Close the offsets' own connection (if it was ever opened); idempotent."""
        if self._offsets_client is not None:
            self._offsets_client.close()

    def _check_running(self) -> None:
        with self._status.cond:
            self.raise_if_failed()
            if self._status.state is MemberState.CLOSED or self._status.stopping.is_set():
                raise MemberClosedError(f"member of group {self.config.group_id} is closed")

    def _usable_generation(self) -> Generation:
        self._check_running()
        generation = self.generation
        if not generation.is_valid:
            raise StaleGenerationError("no current generation (joining, rebalancing or fenced)")
        return generation

    def _after_stale_commit(self, generation: Generation, exc: StaleGenerationError) -> None:
        """Tell the member thread: fenced -> lose partitions; rebalancing -> rejoin."""
        status = self._status
        with status.cond:
            if generation != status.generation:
                return
            if exc.fenced and exc.cause is not None:
                status.pending_fence = exc.cause
            else:
                status.rejoin_reason = status.rejoin_reason or f"commit rejected: {exc.cause}"
        status.wakeup.set()

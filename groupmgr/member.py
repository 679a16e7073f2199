"""``GroupMember``: one member of a Kafka consumer group (classic protocol, eager rebalancing).

``start()`` spawns one background thread that joins the group, then heartbeats every interval.
On REBALANCE_IN_PROGRESS it calls ``listener.on_revoked(owned)`` (the generation stays valid
meanwhile, so the caller may commit final offsets), rejoins, and calls
``listener.on_assigned(generation, partitions)``. When fenced (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID on heartbeat or commit, or a locally expired session) it first invalidates the
generation, then calls ``on_fenced(error)`` and ``on_revoked(partitions)`` (they are lost), and
rejoins. FENCED_INSTANCE_ID (another process took this ``group_instance_id``) is fatal, as in Java.

Listener callbacks run one at a time, in order, on a listener thread; the member thread keeps
heartbeating while it waits for them, for at most the rebalance timeout. A fatal error is recorded
and re-raised to the caller by ``raise_if_failed()`` (Kafka's heartbeat-thread pattern).
Every wait is bounded. Public methods are thread-safe.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Protocol

from groupmgr.assignors import PartitionAssignor, TopicPartition, get_assignor
from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport, Transport
from groupmgr.errors import (FencedInstanceId, GroupError, ListenerError, MemberClosedError,
                             RebalanceInProgress, SessionExpired, StaleGenerationError,
                             UnknownMemberId)
from groupmgr.generation import NO_GENERATION, Generation, MemberState
from groupmgr.heartbeat import HeartbeatTimer
from groupmgr.offsets import OffsetAndMetadata, commit_offsets, fetch_offsets
from groupmgr.rebalance import JoinSpec, RebalanceRound, RoundResult, send_heartbeat, send_leave_group

log = logging.getLogger(__name__)
_ENDED = (MemberState.CLOSED, MemberState.FAILED)


class GroupMember:
    """A consumer-group member driven by one background thread. Public methods are thread-safe."""

    def __init__(self, config: MemberConfig, listener: RebalanceListener, *,
                 transport: Transport | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._spec = config.join_spec()
        self._listener = listener
        self._clock = clock
        transport = transport or KafkaTransport(config.bootstrap_servers, config.client_id, config.client_kwargs)
        self._client = CoordinatorClient(transport, config.group_id, request_timeout_ms=config.request_timeout_ms,
                                         retry_backoff_ms=config.retry_backoff_ms,
                                         retry_backoff_max_ms=config.retry_backoff_max_ms, clock=clock)
        self._timer = HeartbeatTimer(config.session_timeout_ms, config.heartbeat_interval_ms,
                                     config.rebalance_timeout_ms, config.retry_backoff_ms, clock)
        self._cond = threading.Condition()
        self._wakeup = threading.Event()
        self._stopping = threading.Event()
        self._state, self._generation, self._member_id = MemberState.UNJOINED, NO_GENERATION, ""
        self._assignment: tuple[TopicPartition, ...] = ()
        self._owned: tuple[tuple[TopicPartition, ...], int] = ((), -1)  # last owned + its generation
        self._rejoin_reason: str | None = "initial join"
        self._pending_fence: GroupError | None = None
        self._failure: BaseException | None = None
        self._leader: RoundResult | None = None
        self._next_metadata_check = 0.0
        self._close_mode = "close"  # "close" | "abandon"
        self._leave_on_close = config.group_instance_id is None
        self._thread: threading.Thread | None = None
        self._callbacks: ThreadPoolExecutor | None = None

    # -- public API ----------------------------------------------------------------------------
    def start(self) -> "GroupMember":
        """Spawn the member thread (joins, then heartbeats). Returns self; call once."""
        with self._cond:
            if self._thread is not None or self._state in _ENDED:
                raise MemberClosedError("start() may be called once, before close()")
            self._callbacks = ThreadPoolExecutor(1, thread_name_prefix=f"scg-listener-{self.config.group_id}")
            self._thread = threading.Thread(target=self._run, name=f"scg-member-{self.config.group_id}",
                                            daemon=True)
            self._thread.start()
        return self

    @property
    def state(self) -> MemberState:
        with self._cond:
            return self._state

    @property
    def generation(self) -> Generation:
        """The generation commits are made with; NO_GENERATION while (re)joining or fenced."""
        with self._cond:
            return self._generation

    @property
    def assignment(self) -> tuple[TopicPartition, ...]:
        """Partitions owned now (empty while rebalancing)."""
        with self._cond:
            return self._assignment

    @property
    def is_leader(self) -> bool:
        with self._cond:
            return self._leader is not None and self._leader.generation == self._generation

    def raise_if_failed(self) -> None:
        """Re-raise the background thread's fatal error, if any."""
        with self._cond:
            if self._failure is not None:
                raise self._failure

    def wait_until_stable(self, timeout_s: float) -> bool:
        """Wait (bounded) until the member is STABLE; False on timeout. Raises if failed or closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._state in (MemberState.STABLE, *_ENDED), timeout_s)
            self.raise_if_failed()
            if self._state is MemberState.CLOSED:
                raise MemberClosedError(f"member of group {self.config.group_id} is closed")
            return self._state is MemberState.STABLE

    def commit_offsets(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], metadata: str = "",
                       timeout_s: float | None = None) -> None:
        """Commit next-offsets-to-read with the current generation.

        Raises StaleGenerationError when there is no current generation or the broker says it moved
        on (a fenced answer also makes the member thread handle the loss and rejoin).
        """
        generation = self._usable_generation()
        values = {TopicPartition(*tp): v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v, metadata)
                  for tp, v in offsets.items()}
        try:
            commit_offsets(self._client, self.config.group_id, generation, self.config.group_instance_id,
                           values, timeout_s or self.config.request_timeout_ms / 1000)
        except StaleGenerationError as exc:
            self._after_stale_commit(generation, exc)
            raise

    def committed(self, partitions: Iterable[TopicPartition],
                  timeout_s: float | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets (next to read) of ``partitions``; absent when none was committed."""
        self._check_running()
        return fetch_offsets(self._client, self.config.group_id, partitions,
                             timeout_s or self.config.request_timeout_ms / 1000)

    def close(self, leave_group: bool | None = None, timeout_s: float = 30.0) -> None:
        """Revoke owned partitions, leave the group (default: dynamic members only), stop. Bounded."""
        with self._cond:
            if leave_group is not None:
                self._leave_on_close = leave_group
        self._stop_thread(timeout_s)

    def _abandon(self, timeout_s: float = 10.0) -> None:
        """Test hook: stop heartbeating and drop connections without callbacks or LeaveGroup (a crash)."""
        with self._cond:
            self._close_mode = "abandon"
        self._stop_thread(timeout_s)

    # -- caller-side helpers -------------------------------------------------------------------
    def _check_running(self) -> None:
        with self._cond:
            self.raise_if_failed()
            if self._state is MemberState.CLOSED or self._stopping.is_set():
                raise MemberClosedError(f"member of group {self.config.group_id} is closed")

    def _usable_generation(self) -> Generation:
        self._check_running()
        generation = self.generation
        if not generation.is_valid:
            raise StaleGenerationError("no current generation (rejoining or fenced)")
        return generation

    def _after_stale_commit(self, generation: Generation, exc: StaleGenerationError) -> None:
        with self._cond:
            if generation != self._generation:
                return
            if exc.fenced and exc.cause is not None:
                self._pending_fence = exc.cause
            else:
                self._rejoin_reason = f"commit rejected: {exc.cause}"
        self._wakeup.set()

    def _stop_thread(self, timeout_s: float) -> None:
        with self._cond:
            thread, self._thread = self._thread, None
            if thread is None:
                self._state = MemberState.FAILED if self._failure else MemberState.CLOSED
                self._cond.notify_all()
        self._stopping.set()
        self._wakeup.set()
        if thread is None:
            return
        thread.join(timeout_s / 2)
        if thread.is_alive():  # blocked in a long request (JoinGroup): unblock it by closing
            self._client.close()
            thread.join(timeout_s / 2)

    # -- member thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._client.retrying(lambda: self._client.transport.start(self._client.request_timeout_s),
                                  deadline=float("inf"))
            while not self._stopping.is_set():
                self._step()
        except MemberClosedError:
            if not self._stopping.is_set():
                self._record_failure(MemberClosedError("client closed"))
        except BaseException as exc:  # noqa: BLE001 - recorded for raise_if_failed()
            log.exception("group %s: member thread failed", self.config.group_id)
            self._record_failure(exc)
        finally:
            self._shutdown()

    def _step(self) -> None:
        with self._cond:
            fence, self._pending_fence = self._pending_fence, None
            rejoin = self._rejoin_reason is not None
        if fence is not None:
            self._lose(fence)
        elif rejoin:
            self._rebalance()
        else:
            self._wakeup.wait(self._timer.time_to_next_heartbeat())
            self._wakeup.clear()
            if not self._stopping.is_set():
                self._keep_alive()

    def _keep_alive(self) -> None:
        if self._timer.session_expired():
            with self._cond:
                self._pending_fence = SessionExpired(f"no heartbeat answer for {self.config.session_timeout_ms} ms")
        elif self._timer.should_heartbeat():
            self._heartbeat()
        if self._clock() >= self._next_metadata_check and self.is_leader and self.state is MemberState.STABLE:
            self._check_metadata()

    def _heartbeat(self) -> None:
        """One heartbeat; outcomes are recorded (rejoin reason, pending fence), never acted on here."""
        generation = self.generation
        if not generation.is_valid:
            return
        self._timer.sent()
        try:
            send_heartbeat(self._client, self.config.group_id, generation, self.config.group_instance_id,
                           min(self._client.request_timeout_s, self.config.session_timeout_ms / 1000))
            self._timer.received()
        except GroupError as exc:
            self._heartbeat_failed(generation, exc)

    def _heartbeat_failed(self, generation: Generation, exc: GroupError) -> None:
        if exc.retriable:
            self._timer.failed()
            return
        self._timer.received()
        with self._cond:
            if generation != self._generation:
                return
            if isinstance(exc, RebalanceInProgress):
                self._rejoin_reason = self._rejoin_reason or "rebalance in progress"
            elif exc.fenced:
                self._pending_fence = exc
            else:
                raise exc

    def _check_metadata(self) -> None:
        self._next_metadata_check = self._clock() + self.config.metadata_max_age_ms / 1000
        leader = self._leader
        topics = sorted({t for s in leader.subscriptions.values() for t in s.topics})
        counts = self._client.partition_counts(topics, self._client.deadline(self._client.request_timeout_s))
        if dict(counts) != dict(leader.partition_counts):
            log.info("group %s: partition counts changed %s -> %s; rejoining", self.config.group_id,
                     dict(leader.partition_counts), counts)
            with self._cond:
                self._rejoin_reason = "partition counts changed"

    def _rebalance(self) -> None:
        """Revoke (generation still valid), then one JoinGroup/SyncGroup round; errors decide what next."""
        self._revoke()
        with self._cond:
            self._state, self._generation = MemberState.PREPARING_REBALANCE, NO_GENERATION
            owned, owned_generation = self._owned
        round_ = RebalanceRound(self._client, self._spec, self._member_id, owned, owned_generation)
        try:
            result = round_.run()
        except GroupError as exc:
            self._member_id = round_.member_id
            self._round_failed(exc)
            return
        self._install(result)

    def _round_failed(self, exc: GroupError) -> None:
        log.info("group %s: join round failed: %s", self.config.group_id, exc)
        if isinstance(exc, FencedInstanceId) or not (exc.retriable or exc.fenced
                                                      or isinstance(exc, RebalanceInProgress)):
            raise exc
        if isinstance(exc, UnknownMemberId):
            self._member_id = ""
        if exc.retriable:
            self._client.pause(1, float("inf"))

    def _install(self, result: RoundResult) -> None:
        with self._cond:
            self._generation, self._member_id = result.generation, result.generation.member_id
            self._assignment = result.partitions
            self._owned = (result.partitions, result.generation.generation_id)
            self._state, self._rejoin_reason = MemberState.COMPLETING_REBALANCE, None
            self._leader = result if result.is_leader else None
        self._timer.reset()
        self._next_metadata_check = self._clock() + self.config.metadata_max_age_ms / 1000
        self._call_listener("on_assigned", result.generation, result.partitions)
        with self._cond:
            if self._generation == result.generation:
                self._state = MemberState.STABLE
                self._cond.notify_all()

    def _revoke(self) -> None:
        with self._cond:
            partitions = self._assignment
            if self._state is MemberState.STABLE:
                self._state = MemberState.PREPARING_REBALANCE
                self._cond.notify_all()
        if partitions:
            self._call_listener("on_revoked", partitions)
        with self._cond:
            self._assignment = ()

    def _lose(self, error: GroupError) -> None:
        """The generation is gone: invalidate it first, then on_fenced + on_revoked(lost), then rejoin."""
        log.warning("group %s: generation lost: %s", self.config.group_id, error)
        with self._cond:
            partitions, self._assignment = self._assignment, ()
            self._generation, self._state, self._owned = NO_GENERATION, MemberState.FENCED, ((), -1)
            self._rejoin_reason = f"fenced: {error.condition}"
            if isinstance(error, (UnknownMemberId, SessionExpired)):
                self._member_id = ""
            self._cond.notify_all()
        self._call_listener("on_fenced", error)
        if partitions:
            self._call_listener("on_revoked", partitions)
        if isinstance(error, FencedInstanceId):
            raise error

    def _call_listener(self, name: str, *args: object) -> None:
        """Run one callback on the listener thread; heartbeat while waiting, at most the rebalance timeout."""
        future = self._callbacks.submit(getattr(self._listener, name), *args)
        deadline = self._clock() + self.config.rebalance_timeout_ms / 1000
        while True:
            remaining = deadline - self._clock()
            beat = self._timer.time_to_next_heartbeat() if self.generation.is_valid else remaining
            try:
                future.result(timeout=max(0.0, min(remaining, beat)))
                return
            except FutureTimeout:
                pass
            except Exception as exc:
                raise ListenerError(name, exc) from exc
            if self._clock() >= deadline:
                log.warning("group %s: %s still running after the rebalance timeout", self.config.group_id, name)
                return
            self._heartbeat()

    def _record_failure(self, exc: BaseException) -> None:
        with self._cond:
            self._failure = self._failure or exc
            self._state = MemberState.FAILED
            self._cond.notify_all()

    def _shutdown(self) -> None:
        """Revoke and leave as configured (skipped for _abandon and after failures), then close."""
        with self._cond:
            graceful = self._close_mode == "close" and self._failure is None
            leave, member_id = self._leave_on_close, self._member_id
        try:
            if graceful and self._assignment:
                self._call_listener("on_revoked", self._assignment)
            if graceful and leave and member_id:
                send_leave_group(self._client, self.config.group_id, member_id, self.config.group_instance_id,
                                 "closing", min(5.0, self._client.request_timeout_s))
        except BaseException as exc:  # noqa: BLE001 - shutting down anyway; keep the first failure
            log.warning("group %s: clean shutdown incomplete: %s", self.config.group_id, exc)
        finally:
            self._client.close()
            self._callbacks.shutdown(wait=False)
            with self._cond:
                self._assignment, self._generation = (), NO_GENERATION
                self._state = MemberState.FAILED if self._failure else MemberState.CLOSED
                self._cond.notify_all()

"""The member thread's protocol driver: join, heartbeat, revoke, lose, rejoin, shut down.

:class:`MemberLoop` runs on the member's single background thread (``run``). It shares one
:class:`MemberStatus` with the public :class:`groupmgr.member.GroupMember` facade; every field of
the status is guarded by ``status.cond``. Outcomes of heartbeats and commits are *recorded*
(``rejoin_reason``, ``pending_fence``) and acted on by the loop's next step, so listener callbacks
are only ever invoked from this thread, one at a time, in order.

Poll timeout (Kafka's ``max.poll.interval.ms``, as in Java's ``AbstractCoordinator.HeartbeatThread``):
the application calls :meth:`MemberLoop.poll` (the only method callers may use from other threads)
while it makes progress. When a generation's poll timer expires the loop leaves the group
(LeaveGroup, dynamic members only, as in Java), gives up the generation locally, tells the listener
``on_fenced(PollTimeoutExpired)`` then ``on_revoked(lost)``, and parks in ``POLL_TIMEOUT``: no
heartbeats, no rejoin, until the next ``poll()``, which makes it rejoin.

Rebalance protocol (``config.join_spec().protocol``, as Kafka's ``ConsumerCoordinator``):

* eager: before rejoining ``on_revoked(all owned)`` (the generation is still valid, commits work
  until it returns), then no generation until the join completes, then
  ``on_assigned(generation, partitions)``.
* cooperative (KIP-429): before rejoining nothing is revoked (except partitions of topics no longer
  subscribed); the member keeps its partitions and commits keep using the last stable generation
  (``MemberStatus.commit_generation``) while it rejoins, sending what it owns in its subscription.
  After SyncGroup: ``on_revoked(owned - assigned)`` only if that is non-empty (commits then use the
  new generation), then ``on_assigned(generation, full assignment)``; if something was revoked, a
  follow-up rebalance ("revoked partitions must be reassigned") lets the leader give it to its new
  owner. The other members hear of that round in a heartbeat's answer, so for
  :data:`FOLLOW_UP_WINDOW_S` after a cooperative round they heartbeat every fifth of the interval
  (Kafka's clients keep the interval; the protocol allows any rate).
* either protocol: a lost generation (fenced, poll timeout, a fenced answer to a cooperative
  rejoin) is ``on_fenced(error)`` then ``on_revoked(all lost)`` (Kafka's onPartitionsLost).

Failures: retriable broker errors and lost connections are retried where they happen. A failure
of the client library that nothing recognises (``ClientError``) ends the step; the loop forgets
the coordinator and runs the step again after a backoff. The :data:`MAX_CLIENT_ERRORS`-th in a row
(no heartbeat answered and no round completed in between) ends the member with it, named.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

from groupmgr.assignors import COOPERATIVE
from groupmgr.core import TopicPartition
from groupmgr.coordinator_client import CoordinatorClient
from groupmgr.group_errors import (ClientError, FencedInstanceId, GroupError, ListenerError, MemberClosedError,
                             PollTimeoutExpired, RebalanceInProgress, SessionExpired, UnknownMemberId)
from groupmgr.generation import NO_GENERATION, Generation, MemberState
from groupmgr.heartbeat import HeartbeatTimer
from groupmgr.listener import ListenerDispatcher
from groupmgr.member_config import MemberConfig
from groupmgr.rebalance import RebalanceRound, RoundResult, send_heartbeat, send_leave_group

log = logging.getLogger(__name__)
ENDED = (MemberState.CLOSED, MemberState.FAILED)
POLL_RESUMED = "poll resumed after poll timeout"
REASSIGN = "revoked partitions must be reassigned"
MAX_CLIENT_ERRORS = 5  # unrecognised client-library failures in a row before the member ends
# After a cooperative round a follow-up round may come once the old owners released what they
# revoked (their current work done); members that revoked nothing hear of it in a heartbeat's
# answer. For this long they heartbeat every fifth of the interval (at least HURRIED_MIN_S apart).
FOLLOW_UP_WINDOW_S = 10.0
HURRIED_SHARE, HURRIED_MIN_S = 0.2, 0.1


@dataclass(eq=False)
class MemberStatus:
    """State shared by the member thread and callers; read and write only while holding ``cond``."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    wakeup: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    state: MemberState = MemberState.UNJOINED
    generation: Generation = NO_GENERATION  # the current generation (heartbeats); none while (re)joining
    commit_generation: Generation = NO_GENERATION  # what commits use; cooperative: kept while rejoining
    member_id: str = ""
    assignment: tuple[TopicPartition, ...] = ()
    topics: tuple[str, ...] = ()  # the subscription sent in JoinGroup (changes with a pattern)
    owned: tuple[tuple[TopicPartition, ...], int] = ((), -1)  # last owned partitions + their generation
    rejoin_reason: str | None = "initial join"
    pending_fence: GroupError | None = None
    failure: BaseException | None = None
    leader: RoundResult | None = None
    abandon: bool = False
    leave_on_close: bool = True

    def update(self, **changes: object) -> None:
        """Set fields atomically and wake every waiter."""
        with self.cond:
            for name, value in changes.items():
                setattr(self, name, value)
            self.cond.notify_all()


class MemberLoop:
    """Drives one member through the classic group protocol. Used by the member thread only, except
    :meth:`poll` (thread-safe)."""

    def __init__(self, config: MemberConfig, client: CoordinatorClient, status: MemberStatus,
                 dispatcher: ListenerDispatcher, clock: Callable[[], float]) -> None:
        self.config = config
        self._spec = config.join_spec()
        self.protocol = self._spec.protocol
        self._client = client
        self._status = status
        self._callbacks = dispatcher
        self._clock = clock
        self._timer = HeartbeatTimer(config.session_timeout_ms, config.heartbeat_interval_ms,
                                     config.retry_backoff_ms, clock, config.effective_max_poll_interval_ms)
        self._next_metadata_check = 0.0
        self._join_failures = 0
        self._client_errors = 0  # ClientErrors since the last answered heartbeat or completed round

    def run(self) -> None:
        """Bootstrap, then step until stopped; a fatal error is recorded in ``status.failure``."""
        status = self._status
        try:
            self._client.retrying(lambda: self._client.transport.start(self._client.request_timeout_s),
                                  deadline=float("inf"))
            while not status.stopping.is_set():
                try:
                    self._step()
                except ClientError as exc:
                    self._client_failed(exc)
        except MemberClosedError:
            if not status.stopping.is_set():
                self._record_failure(MemberClosedError("client closed"))
        except BaseException as exc:  # noqa: BLE001 - recorded for raise_if_failed()
            if isinstance(exc, GroupError) and not isinstance(exc, ListenerError):
                # a broker's named answer (INVALID_SESSION_TIMEOUT, ...): one line; the traceback
                # only at debug level
                log.error("group %s: member thread ends: %s", self.config.group_id, exc.headline())
                log.debug("group %s: where the member thread ended", self.config.group_id, exc_info=True)
            else:
                log.exception("group %s: member thread failed", self.config.group_id)
            self._record_failure(exc)
        finally:
            self._shutdown()

    # -- the application's liveness (any thread) ------------------------------------------------
    def poll(self) -> None:
        """Thread-safe, no I/O: restart the poll timer; after a poll timeout, make the member
        thread rejoin (``rejoin_reason`` "poll resumed after poll timeout")."""
        status = self._status
        with status.cond:
            self._timer.poll()
            if status.state is not MemberState.POLL_TIMEOUT or status.rejoin_reason is not None:
                return
            status.rejoin_reason = POLL_RESUMED
            status.cond.notify_all()
        status.wakeup.set()

    # -- one step ------------------------------------------------------------------------------
    def _step(self) -> None:
        status = self._status
        with status.cond:
            fence, status.pending_fence = status.pending_fence, None
            rejoin = status.rejoin_reason is not None
            parked = status.state is MemberState.POLL_TIMEOUT
        if fence is not None:
            self._lose(fence)
        elif rejoin:
            self._rebalance()
        elif parked:  # out of the group until poll(); close() and poll() set wakeup
            status.wakeup.wait(self.config.session_timeout_ms / 1000)
            status.wakeup.clear()
        else:
            status.wakeup.wait(min(self._timer.time_to_next_heartbeat(), self._time_to_poll_expiry()))
            status.wakeup.clear()
            if not status.stopping.is_set():
                self._keep_alive()

    def _client_failed(self, exc: ClientError) -> None:
        """A step ended with an unrecognised client failure: forget the coordinator (the next
        request finds it again) and back off; the :data:`MAX_CLIENT_ERRORS`-th in a row is raised."""
        self._client_errors += 1
        if self._client_errors >= MAX_CLIENT_ERRORS:
            raise ClientError(f"{exc.context} ({self._client_errors} times in a row)") from exc
        log.warning("group %s: %s; retrying (%d/%d)", self.config.group_id, exc, self._client_errors,
                    MAX_CLIENT_ERRORS)
        self._client.mark_coordinator_dead(None, exc)
        self._client.pause(self._client_errors, float("inf"))

    def _time_to_poll_expiry(self) -> float:
        """Seconds until the poll timer expires; infinity outside a generation (nothing to give up)."""
        with self._status.cond:
            return self._timer.time_to_poll_expiry() if self._status.generation.is_valid else float("inf")

    def _keep_alive(self) -> None:
        if self._left_after_poll_timeout():
            return
        if self._timer.session_expired() and self._client.coordinator_id is not None:
            self._client.mark_coordinator_dead(None, SessionExpired(
                f"no heartbeat answer for {self.config.session_timeout_ms} ms"))
        if self._timer.should_heartbeat():
            self.heartbeat()
        if self._clock() >= self._next_metadata_check:
            self._check_metadata()

    def heartbeat(self) -> None:
        """One heartbeat if in a generation; the outcome is recorded, never acted on here."""
        generation = self._status.generation
        if not generation.is_valid:
            return
        self._timer.sent()
        try:
            send_heartbeat(self._client, self.config.group_id, generation, self.config.group_instance_id,
                           min(self._client.request_timeout_s, self.config.session_timeout_ms / 1000))
            self._timer.received()
            self._client_errors = 0
        except GroupError as exc:
            self._heartbeat_failed(generation, exc)

    def _heartbeat_failed(self, generation: Generation, exc: GroupError) -> None:
        if exc.retriable:
            self._timer.failed()
            return
        self._timer.received()
        status = self._status
        with status.cond:
            if generation != status.generation:
                return
            if isinstance(exc, RebalanceInProgress):
                status.rejoin_reason = status.rejoin_reason or "rebalance in progress"
            elif exc.fenced:
                status.pending_fence = exc
            else:
                raise exc

    def _check_metadata(self) -> None:
        """Every ``metadata_max_age_ms``: a pattern member re-matches the cluster's topics and the
        leader re-reads partition counts; either change means rejoin."""
        self._next_metadata_check = self._clock() + self.config.metadata_max_age_ms / 1000
        if self._refresh_subscription():
            self._status.update(rejoin_reason="subscribed topics changed")
        else:
            self._check_partition_counts()

    def _metadata_deadline(self) -> float:
        """How long a metadata check may hold this thread: a third of the session timeout (at most
        the request timeout), so heartbeats keep the session alive while a broker is slow."""
        budget_s = min(self._client.request_timeout_s, self.config.session_timeout_ms / 3000)
        return self._client.deadline(budget_s)

    def _refresh_subscription(self) -> bool:
        """Pattern subscription only: re-match the cluster's topics; True if the topics changed.
        A retriable metadata failure keeps the current topics until the next check."""
        if self.config.topic_pattern is None:
            return False
        try:
            names = self._client.topic_names(self._metadata_deadline())
        except GroupError as exc:
            if not exc.retriable:
                raise
            log.info("group %s: topic listing failed (%s); retrying next time", self.config.group_id, exc)
            return False
        topics = self.config.subscribed_topics(names)
        if topics == self._spec.topics:
            return False
        log.info("group %s: topics matching %r: %s -> %s", self.config.group_id, self.config.topic_pattern,
                 list(self._spec.topics), list(topics))
        self._spec = dataclasses.replace(self._spec, topics=topics)
        self._status.update(topics=topics)
        return True

    def _check_partition_counts(self) -> None:
        """Leader only: re-read partition counts; a change (e.g. new partitions) means rejoin."""
        with self._status.cond:
            leader = self._status.leader
            if leader is None or leader.generation != self._status.generation:
                return
        topics = sorted({t for s in leader.subscriptions.values() for t in s.topics})
        try:
            counts = self._client.partition_counts(topics, self._metadata_deadline())
        except GroupError as exc:
            if not exc.retriable:
                raise
            log.info("group %s: metadata check failed (%s); retrying next time", self.config.group_id, exc)
            return
        if dict(counts) != dict(leader.partition_counts):
            log.info("group %s: partition counts changed %s -> %s; rejoining", self.config.group_id,
                     dict(leader.partition_counts), counts)
            self._status.update(rejoin_reason="partition counts changed")

    # -- poll timeout --------------------------------------------------------------------------
    def _left_after_poll_timeout(self) -> bool:
        """If the poll timer of a valid generation expired: give the generation up, leave (dynamic
        members), tell the listener on_fenced(PollTimeoutExpired) + on_revoked(lost); True then."""
        status = self._status
        with status.cond:
            generation, partitions = status.generation, status.assignment
            if not generation.is_valid or not self._timer.poll_timeout_expired():
                return False
            status.assignment, status.generation, status.owned = (), NO_GENERATION, ((), -1)
            status.commit_generation = NO_GENERATION
            status.state, status.member_id, status.leader = MemberState.POLL_TIMEOUT, "", None
            status.pending_fence = status.rejoin_reason = None  # moot: that generation is given up
            status.cond.notify_all()
        error = PollTimeoutExpired(f"group {self.config.group_id}: no poll() for "
                                   f"{self.config.effective_max_poll_interval_ms} ms (max_poll_interval_ms); "
                                   "left the group, rejoining at the next poll()")
        log.warning("consumer poll timeout has expired: %s", error)
        if self.config.group_instance_id is None:  # Java keeps a static member's place
            self._leave(generation.member_id, "consumer poll timeout has expired")
        self._call_listener("on_fenced", error)
        if partitions:
            self._call_listener("on_revoked", partitions)
        return True

    def _leave(self, member_id: str, reason: str) -> None:
        """One LeaveGroup (bounded); a failure is logged: the broker expires the session anyway."""
        try:
            send_leave_group(self._client, self.config.group_id, member_id, self.config.group_instance_id,
                             reason, min(5.0, self._client.request_timeout_s))
        except MemberClosedError:
            raise
        except GroupError as exc:
            log.warning("group %s: LeaveGroup failed (%s); the session will expire", self.config.group_id, exc)

    # -- rebalance -----------------------------------------------------------------------------
    def _rebalance(self) -> None:
        """Eager: revoke everything (generation still valid), then one JoinGroup/SyncGroup round (a
        pattern member re-matches topics first). Cooperative: re-match topics, revoke only partitions
        of topics no longer subscribed, keep the rest (and the commit generation) through the round."""
        cooperative = self.protocol == COOPERATIVE
        if cooperative:
            self._refresh_subscription()
            self._revoke_unsubscribed()
        else:
            self._revoke()
            self._refresh_subscription()
        status = self._status
        with status.cond:
            status.state, status.generation = MemberState.PREPARING_REBALANCE, NO_GENERATION
            if not cooperative:
                status.commit_generation = NO_GENERATION
            status.cond.notify_all()
            owned, owned_generation = status.owned
            member_id, reason = status.member_id, status.rejoin_reason
        round_ = RebalanceRound(self._client, self._spec, member_id, owned, owned_generation, reason)
        try:
            result = round_.run()
        except GroupError as exc:
            self._status.update(member_id=round_.member_id)
            self._round_failed(exc)
            return
        self._install(result)

    def _round_failed(self, exc: GroupError) -> None:
        """Rejoin (with exponential backoff unless it is the first REBALANCE_IN_PROGRESS / fence),
        or raise when the error is fatal."""
        log.info("group %s: join round failed: %s", self.config.group_id, exc)
        if exc.fenced and self._status.assignment:  # cooperative: the kept partitions are lost now
            self._lose(exc)  # raises FencedInstanceId
        if isinstance(exc, FencedInstanceId) or not (exc.retriable or exc.fenced
                                                      or isinstance(exc, RebalanceInProgress)):
            raise exc
        if isinstance(exc, UnknownMemberId):
            self._status.update(member_id="")
        self._join_failures += 1
        if exc.retriable or self._join_failures > 1:
            self._client.pause(self._join_failures, float("inf"))

    def _install(self, result: RoundResult) -> None:
        """Take the new generation; cooperative: on_revoked(owned - assigned) if any (then a
        follow-up rebalance); then on_assigned(generation, full assignment)."""
        generation = result.generation
        self._client_errors = 0
        status = self._status
        with status.cond:
            kept = status.assignment  # eager: () (revoked before joining); cooperative: still owned
        revoked = tuple(sorted(set(kept) - set(result.partitions)))
        status.update(generation=generation, commit_generation=generation, member_id=generation.member_id,
                      state=MemberState.COMPLETING_REBALANCE, rejoin_reason=REASSIGN if revoked else None,
                      leader=result if result.is_leader else None)
        with status.cond:  # the poll timer starts with the generation
            self._timer.reset()
            self._timer.poll()
            if self.protocol == COOPERATIVE:
                self._timer.hurry(max(HURRIED_MIN_S, HURRIED_SHARE * self._timer.interval_s), FOLLOW_UP_WINDOW_S)
        self._join_failures = 0
        self._next_metadata_check = self._clock() + self.config.metadata_max_age_ms / 1000
        if revoked:
            log.info("group %s: generation %d revokes %s; rejoining so they can be reassigned",
                     self.config.group_id, generation.generation_id, [f"{tp.topic}-{tp.partition}" for tp in revoked])
            self._call_listener("on_revoked", revoked)
        with status.cond:
            if status.generation != generation:  # lost while on_revoked ran (it told the listener)
                return
            status.assignment = result.partitions
            status.owned = (result.partitions, generation.generation_id)
            status.cond.notify_all()
        self._call_listener("on_assigned", generation, result.partitions)
        with self._status.cond:
            if self._status.generation == generation:
                self._status.state = MemberState.STABLE
                self._status.cond.notify_all()

    def _revoke(self) -> None:
        status = self._status
        with status.cond:
            partitions = status.assignment
            if status.state is MemberState.STABLE:
                status.state = MemberState.PREPARING_REBALANCE
                status.cond.notify_all()
        if partitions:
            self._call_listener("on_revoked", partitions)
        status.update(assignment=())

    def _revoke_unsubscribed(self) -> None:
        """Cooperative rejoin: revoke only the partitions of topics no longer subscribed (Kafka's
        onJoinPrepare); the generation stays valid while on_revoked runs."""
        status = self._status
        with status.cond:
            owned, owned_generation = status.assignment, status.owned[1]
            if status.state is MemberState.STABLE:
                status.state = MemberState.PREPARING_REBALANCE
                status.cond.notify_all()
        gone = tuple(tp for tp in owned if tp.topic not in self._spec.topics)
        if gone:
            self._call_listener("on_revoked", gone)
            kept = tuple(tp for tp in owned if tp.topic in self._spec.topics)
            status.update(assignment=kept, owned=(kept, owned_generation))

    def _lose(self, error: GroupError) -> None:
        """The generation is gone: invalidate it first, then on_fenced + on_revoked(lost), then rejoin."""
        log.warning("group %s: generation lost: %s", self.config.group_id, error)
        status = self._status
        with status.cond:
            partitions = status.assignment
            status.assignment, status.generation, status.owned = (), NO_GENERATION, ((), -1)
            status.commit_generation = NO_GENERATION
            status.state, status.rejoin_reason = MemberState.FENCED, f"fenced: {error.condition}"
            if isinstance(error, UnknownMemberId):
                status.member_id = ""
            status.cond.notify_all()
        self._call_listener("on_fenced", error)
        if partitions:
            self._call_listener("on_revoked", partitions)
        if isinstance(error, FencedInstanceId):
            raise error

    def _call_listener(self, hook: str, *args: object) -> None:
        """Run a listener hook (bounded by the rebalance timeout), heartbeating while it runs."""
        def next_beat() -> float | None:
            return self._timer.time_to_next_heartbeat() if self._status.generation.is_valid else None

        self._callbacks.call(hook, args, next_beat, self.heartbeat)

    # -- the end -------------------------------------------------------------------------------
    def _record_failure(self, exc: BaseException) -> None:
        with self._status.cond:
            self._status.failure = self._status.failure or exc
        self._status.update(state=MemberState.FAILED)

    def _shutdown(self) -> None:
        """Revoke (on_revoked) and leave as configured, then close. ``_abandon`` skips both; after a
        failure the listener still hears on_revoked (unless it is what failed)."""
        status = self._status
        with status.cond:
            failure, owned, member_id = status.failure, status.assignment, status.member_id
            revoke = not status.abandon and not isinstance(failure, ListenerError) and owned
            leave = (not status.abandon and status.leave_on_close and member_id
                     and not isinstance(failure, FencedInstanceId))
        try:
            if revoke:
                self._call_listener("on_revoked", owned)
            if leave:
                send_leave_group(self._client, self.config.group_id, member_id, self.config.group_instance_id,
                                 "closing", min(5.0, self._client.request_timeout_s))
        except BaseException as exc:  # noqa: BLE001 - shutting down anyway; keep the first failure
            log.warning("group %s: clean shutdown incomplete: %s", self.config.group_id, exc)
        finally:
            self._client.close()
            self._callbacks.shutdown()
            status.update(assignment=(), generation=NO_GENERATION, commit_generation=NO_GENERATION,
                          state=MemberState.FAILED if status.failure else MemberState.CLOSED)

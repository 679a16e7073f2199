"""Talking to the group coordinator: discovery, bounded request/response, rediscovery with backoff.

Two layers, so tests can script the broker at exactly one boundary:

* :class:`Transport` - sends one kafka-python request object to one node and returns the response
  object (or raises a :mod:`groupmgr.group_errors` error). :class:`KafkaTransport` is the real one, built
  on kafka-python's connection manager (connections, SASL/SSL, api-version negotiation; Kafka 4.x
  removed old request versions, so versions are always negotiated, never hard-coded).
* :class:`CoordinatorClient` - finds the coordinator (FindCoordinator, key type group), sends
  requests to it, marks it dead on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / connection loss,
  and retries retriable errors with exponential backoff bounded by a caller's deadline.

Thread-safety: ``CoordinatorClient`` and ``KafkaTransport`` may be used from several threads at
once; kafka-python runs all socket IO on its own IO thread and every call here waits for its
response with a bound (no unbounded waits).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable, Mapping, Protocol, Sequence, TypeVar

from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest, MetadataRequest

from groupmgr.group_errors import (CoordinatorUnreachable, GroupError, MemberClosedError,
                             raise_for_error_code, translate_client_error)

log = logging.getLogger(__name__)
NodeId = Any  # kafka-python uses int broker ids and "coordinator-<id>" strings
T = TypeVar("T")


class Transport(Protocol):
    """Sends one request to one node (``None``: any node) and returns the response object."""

    def start(self, timeout_s: float) -> None: ...

    def send(self, request: Any, node_id: NodeId | None, timeout_s: float) -> Any: ...

    def add_coordinator(self, group_id: str, coordinator: Any) -> NodeId: ...

    def close(self) -> None: ...


# Connection settings we choose; ``client_kwargs`` (security etc.) may override them.
_TRANSPORT_DEFAULTS = {"reconnect_backoff_ms": 50, "reconnect_backoff_max_ms": 1000,
                       "socket_connection_setup_timeout_ms": 5000,
                       "socket_connection_setup_timeout_max_ms": 10000}
#: The kafka-python settings a transport takes (what a pipeline's ``client_config`` may set for the member).
ACCEPTED_CLIENT_SETTINGS = frozenset(KafkaConnectionManager.DEFAULT_CONFIG) - {"bootstrap_servers", "client_id"}
_WAIT_MARGIN_S = 1.0  # the connection layer times a request out first; this is the backstop


class KafkaTransport:
    """kafka-python's connection manager with its own IO thread. Thread-safe.

    ``client_kwargs`` are kafka-python connection kwargs (``security_protocol``, ``sasl_mechanism``,
    ``sasl_plain_username``, ``sasl_plain_password``, ``ssl_cafile``, ...), passed through as given.
    """

    def __init__(self, bootstrap_servers: str, client_id: str,
                 client_kwargs: Mapping[str, Any] | None = None) -> None:
        config = {**_TRANSPORT_DEFAULTS, **dict(client_kwargs or {}),
                  "bootstrap_servers": bootstrap_servers, "client_id": client_id}
        self._net = NetworkSelector(client_id=client_id)
        self._manager = KafkaConnectionManager(self._net, **config)
        self._closed = False
        self._lock = threading.Lock()
        self._waiters: set[threading.Event] = set()

    def start(self, timeout_s: float) -> None:
        """Start the IO thread and bootstrap (metadata + api versions) within ``timeout_s``."""
        if self._closed:
            raise CoordinatorUnreachable("transport closed")
        self._net.start()
        future = self._manager.bootstrap_async(timeout_ms=timeout_s * 1000)
        self._wait(future, timeout_s + _WAIT_MARGIN_S, "bootstrap")

    def send(self, request: Any, node_id: NodeId | None, timeout_s: float) -> Any:
        """Send ``request`` (version negotiated per broker) and wait at most ``timeout_s`` (+margin)."""
        timeout_ms = max(1, int(timeout_s * 1000))

        async def _send() -> Any:
            return await self._manager.send(request, node_id=node_id, request_timeout_ms=timeout_ms)

        return self._wait(self._submit(_send), timeout_s + _WAIT_MARGIN_S, request.name)

    def add_coordinator(self, group_id: str, coordinator: Any) -> NodeId:
        """Register a FindCoordinator result; returns the node id to send group requests to."""
        register = lambda: self._manager.cluster.add_coordinator(  # noqa: E731 - runs on the IO thread
            coordinator, CoordinatorType.GROUP, group_id)
        return self._wait(self._submit(register), 5.0, "add_coordinator")

    def close(self) -> None:
        """Close all connections, wake every waiting caller, stop the IO thread (bounded). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            waiters, self._waiters = set(self._waiters), set()
        for event in waiters:
            event.set()
        done = threading.Event()
        try:
            self._manager.call_soon(self._manager.close).add_both(lambda _: done.set())
            done.wait(5.0)
        except RuntimeError as exc:  # the IO loop already stopped
            log.debug("closing connections: %s", exc)
        self._net.stop(timeout_ms=5000)
        self._net.close()

    def _submit(self, task: Callable[[], Any]) -> Any:
        """Schedule ``task`` on the IO thread; a closed transport raises CoordinatorUnreachable."""
        try:
            if not self._closed:
                return self._manager.call_soon(task)
        except RuntimeError:  # NetworkSelector closed
            pass
        raise CoordinatorUnreachable("transport closed")

    def _wait(self, future: Any, timeout_s: float, what: str) -> Any:
        done = threading.Event()
        with self._lock:
            self._waiters.add(done)
        future.add_both(lambda _: done.set())
        try:
            if not done.wait(timeout_s):
                raise CoordinatorUnreachable(f"{what}: no response within {timeout_s:.1f}s")
        finally:
            with self._lock:
                self._waiters.discard(done)
        if not future.is_done:
            raise CoordinatorUnreachable(f"{what}: transport closed")
        if future.exception is not None:
            raise translate_client_error(future.exception, what)
        return future.value


class CoordinatorClient:
    """The group coordinator of one group, found on demand and re-found after failures. Thread-safe."""

    def __init__(self, transport: Transport, group_id: str, *, request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.transport = transport
        self.group_id = group_id
        self.request_timeout_s = request_timeout_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self._backoff_max_s = max(retry_backoff_max_ms, retry_backoff_ms) / 1000
        self._clock = clock
        self._lock = threading.Lock()
        self._coordinator: NodeId | None = None
        self._closed = threading.Event()

    @property
    def coordinator_id(self) -> NodeId | None:
        """The node id of the current coordinator, or None while unknown."""
        with self._lock:
            return self._coordinator

    def deadline(self, timeout_s: float) -> float:
        """The instant ``timeout_s`` from now on this client's clock."""
        return self._clock() + timeout_s

    def mark_coordinator_dead(self, node_id: NodeId | None, cause: BaseException) -> None:
        """Forget the coordinator (only if it is still ``node_id``); the next request re-discovers it."""
        with self._lock:
            if self._coordinator is not None and (node_id is None or node_id == self._coordinator):
                log.info("group %s: coordinator %s marked dead: %s", self.group_id, self._coordinator, cause)
                self._coordinator = None

    def ensure_coordinator(self, deadline: float) -> NodeId:
        """The coordinator's node id, discovering it (with backoff) until ``deadline`` if unknown."""
        known = self.coordinator_id
        if known is not None:
            return known
        return self.retrying(lambda: self._find_coordinator(deadline), deadline)

    def send_once(self, request: Any, handle: Callable[[Any], T], timeout_s: float | None = None) -> T:
        """Send ``request`` to the coordinator once; ``handle`` classifies the response.

        On an error that needs rediscovery the coordinator is marked dead before re-raising.
        """
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        node = self.ensure_coordinator(self._clock() + timeout_s)
        try:
            return handle(self.transport.send(request, node, timeout_s))
        except GroupError as exc:
            if exc.rediscover:
                self.mark_coordinator_dead(node, exc)
            raise

    def call(self, build: Callable[[], Any], handle: Callable[[Any], T], deadline: float,
             timeout_s: float | None = None) -> T:
        """``send_once`` with a fresh request per attempt, retrying retriable errors until ``deadline``."""
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        return self.retrying(lambda: self.send_once(build(), handle, timeout_s), deadline)

    def retrying(self, attempt: Callable[[], T], deadline: float) -> T:
        """Run ``attempt`` until it succeeds, a non-retriable error, ``deadline`` or close."""
        failures = 0
        while True:
            self._check_open()
            try:
                return attempt()
            except GroupError as exc:
                if not exc.retriable:
                    raise
                failures += 1
                if not self.pause(failures, deadline):
                    self._check_open()
                    raise

    def pause(self, failures: int, deadline: float) -> bool:
        """Exponential backoff with jitter; False (without waiting) if it would pass ``deadline``."""
        delay = min(self._backoff_max_s, self._backoff_s * 2 ** (failures - 1)) * random.uniform(0.8, 1.2)
        if self._clock() + delay > deadline:
            return False
        return not self._closed.wait(delay)

    def partition_counts(self, topics: Sequence[str], deadline: float) -> dict[str, int]:
        """Partition count of each topic that exists; topics without metadata are left out."""
        if not topics:
            return {}
        return self.retrying(lambda: self._fetch_partition_counts(sorted(set(topics)), deadline), deadline)

    def topic_names(self, deadline: float) -> set[str]:
        """Names of every non-internal topic in the cluster (one Metadata request for all topics)."""
        return self.retrying(lambda: self._fetch_topic_names(deadline), deadline)

    def _send_metadata(self, request: MetadataRequest, deadline: float):
        """One Metadata request to any broker, waiting at most until ``deadline`` (and the request timeout)."""
        timeout_s = min(self.request_timeout_s, max(0.001, deadline - self._clock()))
        return self.transport.send(request, None, timeout_s)

    def close(self) -> None:
        """Stop retries in progress and close the transport. Idempotent."""
        self._closed.set()
        self.transport.close()

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise MemberClosedError(f"client of group {self.group_id} is closed")

    def _find_coordinator(self, deadline: float) -> NodeId:
        request = FindCoordinatorRequest(key=self.group_id, key_type=0, coordinator_keys=[self.group_id])
        response = self.transport.send(request, None, min(self.request_timeout_s, max(0.001, deadline - self._clock())))
        result = response.coordinators[0] if response.coordinators else response
        raise_for_error_code(result.error_code, f"FindCoordinator for group {self.group_id}")
        node = self.transport.add_coordinator(self.group_id, result)
        with self._lock:
            self._coordinator = node
        log.info("group %s: coordinator is node %s (%s:%s)", self.group_id, result.node_id,
                 result.host, result.port)
        return node

    def _fetch_topic_names(self, deadline: float) -> set[str]:
        response = self._send_metadata(MetadataRequest(topics=None, allow_auto_topic_creation=False), deadline)
        return {t.name for t in response.topics if t.error_code == 0 and not t.is_internal}

    def _fetch_partition_counts(self, topics: list[str], deadline: float) -> dict[str, int]:
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                                  allow_auto_topic_creation=False)
        response = self._send_metadata(request, deadline)
        counts = {}
        for topic in response.topics:
            if topic.error_code == 0 and topic.name in topics:
                counts[topic.name] = len(topic.partitions)
            else:
                log.debug("no metadata for topic %s (error %s)", topic.name, topic.error_code)
        return counts


class LazilyStartedClient:
    """A :class:`CoordinatorClient` whose transport is started by the first caller that needs it
    (no member thread starts it): one start at a time, later callers wait for it (bounded);
    :meth:`close` also ends a start in progress (the transport wakes its waiters). Thread-safe."""

    def __init__(self, client: CoordinatorClient) -> None:
        self.client = client
        self._cond = threading.Condition()
        self._state = "new"  # new -> starting -> started; any -> closed
        self._start_attempted = False  # a failed start leaves the transport's IO thread running

    def get(self, timeout_s: float) -> CoordinatorClient:
        """The client, its transport started (within ``timeout_s``); raises MemberClosedError once
        closed, CoordinatorUnreachable when the brokers cannot be reached in time."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._state != "starting", timeout_s):
                raise CoordinatorUnreachable(f"connection still opening after {timeout_s:.1f}s")
            if self._state == "closed":
                raise MemberClosedError(f"client of group {self.client.group_id} is closed")
            if self._state == "started":
                return self.client
            self._state, self._start_attempted = "starting", True
        started = False
        try:
            self.client.retrying(lambda: self.client.transport.start(min(timeout_s, self.client.request_timeout_s)),
                                 deadline=self.client.deadline(timeout_s))
            started = True
        finally:
            with self._cond:
                if self._state == "starting":
                    self._state = "started" if started else "new"
                closed = self._state == "closed"
                self._cond.notify_all()
        if closed:
            raise MemberClosedError(f"client of group {self.client.group_id} is closed")
        return self.client

    def close(self) -> None:
        """Close the client if its transport was ever started, or a start was tried; idempotent."""
        with self._cond:
            opened = self._start_attempted
            self._state = "closed"
            self._cond.notify_all()
        if opened:
            self.client.close()

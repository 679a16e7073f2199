"""Transient or permanent: the runner's classification of any failure (pure, no I/O).

The runner retries a **transient** fault with backoff for as long as it lasts and ends the member
only for a **permanent** one (or a transient one that outlived its ``give_up_after_s``), with the
fault's named condition. An **unknown** failure gets a bounded number of restarts
(``pipelines.runtime.runner.MAX_UNKNOWN_RESTARTS``), then ends the member.

Rules of :func:`classify_failure`, first match wins:

1. Kafka client errors (confluent-kafka, kafka-python, ``GroupError``, connection and timeout
   errors): :func:`groupmgr.kafka_faults.classify_kafka`.
2. The project's own errors: ``StorageUnavailable`` by its reason (rule 4); ``FencedWriterError``
   (another member owns the partition: the group rebalances), ``SinkError`` (commit contention),
   ``SourceChanged`` (a recreated topic, a log gone back), ``TopicIdsUnconfirmed`` (brokers that
   did not describe a topic) and deltalake's ``CommitFailedError`` are transient; ``OffsetGapError``,
   ``NoStartingOffsetError`` and every other ``ScgError`` are permanent.
3. deltalake: ``DeltaProtocolError``, ``SchemaMismatchError``, ``TableNotFoundError`` permanent.
4. ``OSError`` (deltalake and object-store IO): permanent when the store says the credentials,
   permissions or bucket are wrong (:data:`STORAGE_PERMANENT`), transient otherwise.
5. Anything else is judged by its text (a Spark ``StreamingQueryException`` carries the JVM
   exception chain and the Python traceback of a failed task): a permanent marker anywhere wins
   (Kafka's authorization/authentication/invalid-topic exceptions, storage refusals); then
   Spark's data-loss errors, transient ``KAFKA_DATA_LOSS``: the restart's partition checks find
   the partition and apply ``source.on_data_loss`` to it alone
   (:mod:`pipelines.runtime.partition_checks`); then a transient marker (Kafka's
   retriable exception classes ``org.apache.kafka.common.errors.*``, ``java.net`` connection
   errors, ``java.util.concurrent.TimeoutException``, Java and Python IO errors, the transient
   errors of the executors' Kafka readers and schema registry, a confluent-kafka
   ``KafkaError{code=...}``); otherwise unknown. A schema registry's refusal of the credentials,
   raised in an executor, is permanent. The project's errors raised in the driver's Python are never judged by their name in
   a text: the batch writer hands the runner the exception object itself.

:class:`RestartPolicy` turns classified failures into verdicts: retry after how long, or give up.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from deltalake.exceptions import CommitFailedError, DeltaProtocolError, SchemaMismatchError, TableNotFoundError

from groupmgr.core import ScgError
from groupmgr.kafka_faults import Backoff, Fault, FaultKind, FaultStreak, classify_kafka, classify_kafka_code
from pipelines.runtime.kafka_range_reader import KafkaReadStalled, LogEndsUnavailable
from pipelines.runtime.registry_client import RegistryRefusedError, RegistryUnavailableError
from sinks.txn_table import FencedWriterError, SinkError, StorageUnavailable

TRANSIENT, PERMANENT, UNKNOWN = FaultKind.TRANSIENT, FaultKind.PERMANENT, FaultKind.UNKNOWN

# Apache Kafka's RetriableException subclasses (and DisconnectException) as the Java client names them.
KAFKA_RETRIABLE_JAVA = frozenset("""
    CoordinatorLoadInProgressException CoordinatorNotAvailableException NotCoordinatorException
    ConcurrentTransactionsException DisconnectException FencedLeaderEpochException
    FetchSessionIdNotFoundException FetchSessionTopicIdException InconsistentTopicIdException
    InvalidFetchSessionEpochException InvalidMetadataException KafkaStorageException
    LeaderNotAvailableException NetworkException NotControllerException
    NotEnoughReplicasAfterAppendException NotEnoughReplicasException NotLeaderForPartitionException
    NotLeaderOrFollowerException OffsetNotAvailableException PreferredLeaderNotAvailableException
    ReplicaNotAvailableException RetriableCommitFailedException ThrottlingQuotaExceededException
    TimeoutException UnknownLeaderEpochException UnknownTopicIdException
    UnknownTopicOrPartitionException UnstableOffsetCommitException EligibleLeadersNotAvailableException
    RebalanceInProgressException
""".split())
KAFKA_PERMANENT_JAVA = frozenset("""
    TopicAuthorizationException GroupAuthorizationException ClusterAuthorizationException
    TransactionalIdAuthorizationException DelegationTokenAuthorizationException
    SaslAuthenticationException SslAuthenticationException AuthenticationException
    AuthorizationException IllegalSaslStateException UnsupportedSaslMechanismException
    InvalidTopicException RecordTooLargeException SerializationException UnsupportedVersionException
    InvalidConfigurationException OffsetOutOfRangeException InvalidRequestException
""".split())
# Words an object store uses when the request can never succeed as configured.
STORAGE_PERMANENT = re.compile(
    r"AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|NoSuchBucket|InvalidBucketName|"
    r"AuthorizationPermissionMismatch|AuthenticationFailed|ExpiredToken|InvalidToken|"
    r"PermissionDenied|Permission denied|Forbidden|Unauthorized")
_JAVA_KAFKA = re.compile(r"org\.apache\.kafka\.common\.errors\.(\w+)")
_SPARK_DATA_LOSS = re.compile(r"KAFKA_DATA_LOSS|Some data may have been lost|failOnDataLoss")
_JAVA_TRANSIENT = re.compile(
    r"java\.net\.(?:ConnectException|SocketTimeoutException|SocketException|NoRouteToHostException|"
    r"UnknownHostException)|java\.util\.concurrent\.TimeoutException|java\.io\.(?:IOException|"
    r"InterruptedIOException|EOFException)|org\.apache\.hadoop\.fs\.s3a\.AWSClientIOException|"
    r"SdkClientException")
_PYTHON_IO = re.compile(r"\b(?:OSError|ConnectionError|ConnectionRefusedError|ConnectionResetError|"
                        r"BrokenPipeError|TimeoutError|IOError)\b")
_CONFLUENT = re.compile(r"KafkaError\{code=(\w+),val=(-?\d+)")
# The project's errors that reach the runner only as text: raised in the executors' Python
# workers (reading Kafka) or the scg-kafka planner's, then passed on by Spark inside the query's
# failure. Errors raised in the driver's Python (the batch writer's, the sink's, the starts') reach
# the runner as objects (``BatchWriter.failure``) and are judged by rules 1-4.
_WORKER_PERMANENT = {cls.__name__: cls.condition for cls in (RegistryRefusedError,)}
_WORKER_TRANSIENT = {cls.__name__: cls.condition
                     for cls in (KafkaReadStalled, LogEndsUnavailable, RegistryUnavailableError)}


def classify_failure(exc: BaseException, text: str | None = None) -> Fault:
    """The fault of ``exc`` by the module rules (never raises). ``text``: ``exc`` with its cause
    chain spelled out (``streaming_query.failure_text``) for rule 5; default ``Type: message``."""
    kafka = classify_kafka(exc)
    if kafka is not None:
        return kafka
    if isinstance(exc, StorageUnavailable):
        return classify_storage(exc.reason, exc.condition)
    if isinstance(exc, FencedWriterError):
        return Fault(TRANSIENT, exc.condition, _one_line(exc))
    if isinstance(exc, ScgError):
        transient = type(exc) is SinkError or bool(getattr(exc, "retriable", False))
        return Fault(TRANSIENT if transient else PERMANENT, exc.condition, _one_line(exc))
    if isinstance(exc, CommitFailedError):
        return Fault(TRANSIENT, "COMMIT_CONFLICT", _one_line(exc))
    if isinstance(exc, (DeltaProtocolError, SchemaMismatchError, TableNotFoundError)):
        return Fault(PERMANENT, "DELTA_" + _snake(type(exc).__name__.removeprefix("Delta").removesuffix("Error")),
                     _one_line(exc))
    if isinstance(exc, OSError):
        return classify_storage(f"{type(exc).__name__}: {exc}")
    return classify_text(text or f"{type(exc).__name__}: {exc}")


def classify_storage(reason: str, condition: str = "STORAGE_UNAVAILABLE") -> Fault:
    """A storage failure: permanent when the store refused the credentials, permissions or bucket."""
    kind = PERMANENT if STORAGE_PERMANENT.search(reason) else TRANSIENT
    return Fault(kind, condition, _one_line(reason))


def classify_text(text: str) -> Fault:
    """Judge a failure by its text (a Spark query's exception chain and Python traceback). The
    fault's detail is the line holding the marker that decided (not the chain's first line, which
    for a failed batch is Spark's generic ``An exception was raised by the Python Proxy``)."""
    detail = _one_line(text)
    java = list(_JAVA_KAFKA.finditer(text))
    for match in java:
        if match.group(1) in KAFKA_PERMANENT_JAVA:
            return Fault(PERMANENT, _snake(match.group(1).removesuffix("Exception")), _line_at(text, match))
    data_loss = _SPARK_DATA_LOSS.search(text)
    if data_loss:
        return Fault(TRANSIENT, "KAFKA_DATA_LOSS", _line_at(text, data_loss))
    if _raised("StorageUnavailable", text) or STORAGE_PERMANENT.search(text) and _PYTHON_IO.search(text):
        return classify_storage(text)
    for code_name, value in _CONFLUENT.findall(text):
        return classify_kafka_code(int(value), code_name, detail)
    for match in java:
        if match.group(1) in KAFKA_RETRIABLE_JAVA:
            return Fault(TRANSIENT, _snake(match.group(1).removesuffix("Exception")), _line_at(text, match))
    for name, condition in _WORKER_PERMANENT.items():
        if _raised(name, text):
            return Fault(PERMANENT, condition, _line_at(text, re.search(rf"\b{name}: ", text)))
    for name, condition in _WORKER_TRANSIENT.items():
        if _raised(name, text):
            return Fault(TRANSIENT, condition, _line_at(text, re.search(rf"\b{name}: ", text)))
    transient = _JAVA_TRANSIENT.search(text) or _PYTHON_IO.search(text)
    if transient:
        return Fault(TRANSIENT, "IO_ERROR", _line_at(text, transient))
    return Fault(UNKNOWN, "UNCLASSIFIED_FAILURE", detail)


def _line_at(text: str, match) -> str:
    """The line of ``text`` holding ``match`` (stripped, at most 300 characters)."""
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start:end if end >= 0 else len(text)].strip()[:300]


def _raised(name: str, text: str) -> bool:
    """True when ``text`` holds the exception line of class ``name`` (``pkg.mod.Name: message``),
    not merely a source line that mentions it (a traceback shows ``raise Name(...)``)."""
    return re.search(rf"\b{name}: ", text) is not None


def _snake(name: str) -> str:
    """``NotLeaderOrFollower`` -> ``NOT_LEADER_OR_FOLLOWER``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()


def _one_line(value) -> str:
    lines = [line.strip() for line in str(value).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(value).__name__


@dataclass(frozen=True)
class Verdict:
    """What to do about one failure: retry after ``delay_s``, or give up (``delay_s`` None).

    ``attempt`` counts the failures of the current streak (reset by a success); ``persisted_s``
    is how long the same condition has lasted; ``unknown_count`` counts unrecognised failures in a
    row (``unknown_limit`` allowed)."""

    fault: Fault
    attempt: int
    delay_s: float | None
    persisted_s: float = 0.0
    unknown_count: int = 0
    unknown_limit: int = 0

    @property
    def give_up(self) -> bool:
        return self.delay_s is None


class RestartPolicy:
    """Failure by failure: a transient fault is retried after a bounded exponential backoff with
    jitter for as long as it lasts (unless it outlives its ``give_up_after_s``); a permanent one
    gives up at once; an unknown one after ``max_unknown`` restarts in a row. A success
    (:meth:`succeeded`) ends the streak. Not thread safe; clock injected."""

    def __init__(self, backoff: Backoff, max_unknown: int, clock: Callable[[], float],
                 classify: Callable[[BaseException], Fault] = None,  # type: ignore[assignment]
                 rand: Callable[[], float] | None = None):
        self.backoff, self.max_unknown = backoff, max_unknown
        self._classify = classify or classify_failure
        self._rand = rand
        self._streak = FaultStreak(clock)
        self._unknown = 0

    def failed(self, exc: BaseException) -> Verdict:
        fault = self._classify(exc)
        attempt = self._streak.failed(fault)
        self._unknown = self._unknown + 1 if fault.kind is UNKNOWN else 0
        persisted = self._streak.persisted_s()
        give_up = (fault.kind is PERMANENT or self._streak.gave_up(fault)
                   or (fault.kind is UNKNOWN and self._unknown > self.max_unknown))
        delay = None if give_up else self.backoff.delay(attempt, None if self._rand is None else self._rand())
        return Verdict(fault, attempt, delay, persisted, self._unknown, self.max_unknown)

    def succeeded(self) -> None:
        self._streak.succeeded()
        self._unknown = 0

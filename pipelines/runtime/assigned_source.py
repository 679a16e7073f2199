"""``scg-kafka``: a Spark streaming source over the partitions the member runs *now*.

Spark's Kafka source fixes its partitions when the query starts, so a member whose assignment
changes must restart its query. This source (a Python data source, Spark >= 4.2) plans every
micro-batch over the member's current assignment instead: the runner writes the assignment to a
small file on the driver (:class:`AssignmentFile`, replaced atomically), the source's planner reads
it at each trigger, and a partition joins or leaves the query at a batch boundary with no restart.
The executors read the planned ranges with confluent-kafka (:func:`read_range`).

Division of work:

* driver, Spark's Python planner process — :class:`AssignedKafkaReader` ``latestOffset``: the
  assignment, the brokers' log ends (``ListOffsets`` with the consumer's isolation level:
  ``read_committed`` plans up to the last stable offset), admission control, the next
  :class:`~pipelines.runtime.assigned_offsets.SourceOffset`; ``partitions``: the non-empty ranges
  grouped into tasks (:func:`~pipelines.runtime.assigned_offsets.task_groups`: one per core the
  application has, as the runner last wrote it in the file, more for a large batch, at most one
  per range);
* executors — ``read``: the records of the task's ranges, one range after the other, or
  :class:`KafkaDataLoss`.

What users of Spark's Kafka source rely on is kept: every librdkafka client setting (security
included) reaches both the planner's admin client and the executors' consumers (options
``kafka.<librdkafka name>``; ``isolation.level`` defaults to ``read_uncommitted`` as with Spark's
source), ``maxOffsetsPerTrigger`` / ``minOffsetsPerTrigger`` +
``maxTriggerDelay`` behave as Spark's, data loss fails the query with Spark's wording, rows have
Spark's Kafka schema. Offsets live in the Delta table (the source commits nothing to Kafka); the
checkpoint's offset log records each batch's ranges (:func:`batch_ranges`).
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from groupmgr.core import OffsetRange, TopicPartition
from pipelines.runtime.assigned_offsets import (INITIAL, Assignment, RateLimits, SourceOffset, batch_ranges,
                                                delay_batch, plan_next, task_groups)
from pipelines.runtime.kafka_range_reader import KafkaDataLoss, LogEndsUnavailable, read_range
from pipelines.runtime.task_gc import task_gc

SOURCE_NAME = "scg-kafka"
ASSIGNMENT_OPTION = "assignmentFile"
SLOTS_OPTION = "taskSlots"  # the application's cores when the query started (defaultParallelism),
                            # until the assignment file says how many it has now
HEADERS_OPTION = "includeHeaders"  # as Spark's Kafka source: "true" adds the column `headers`
TRIGGER_OPTION = "triggerIntervalMs"  # the query's processing-time interval (0: none): an idle planner's wait
IDLE_WAIT_MARGIN_MS = 100         # an idle planner's wait ends this long before the next trigger is due
IDLE_WAIT_MAX_MS = 2_000          # and holds a stopping query up no longer than this
ASSIGNMENT_POLL_S = 0.02          # how often a waiting planner looks at the assignment file
KAFKA_PREFIX = "kafka."
LOG_END_GRACE_S = 30.0  # a partition whose log end cannot be read is held this long, then the query fails


class AssignmentFile:
    """The runner's current assignment (and the application's cores), shared with the source's
    planner on the same host.

    :meth:`write` replaces the file atomically (rename), so a reader sees the old or the new
    assignment, never a mix; a missing file is an empty assignment. Safe across processes."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def write(self, assignment: Assignment) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".assignment-")
        with os.fdopen(fd, "w") as f:
            f.write(assignment.to_json())
        os.replace(tmp, self.path)

    def read(self) -> Assignment:
        try:
            return Assignment.from_json(self.path.read_text())
        except FileNotFoundError:
            return Assignment()

    def version(self) -> tuple[int, int] | None:
        """What changes with every :meth:`write` (each one is a new file), short of two writes
        within one tick of the file system's clock that reuse a freed inode; None: no file."""
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return None
        return found.st_ino, found.st_mtime_ns

    def wait_for_change(self, version: tuple[int, int] | None, deadline: float,
                        poll_s: float = ASSIGNMENT_POLL_S) -> bool:
        """Wait until the file is no longer at ``version`` (True) or ``time.monotonic()``
        reaches ``deadline`` (False)."""
        while self.version() == version:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(poll_s, left))
        return True


class RangesPartition(InputPartition):
    """The planned ranges one Spark task reads, one after the other (picklable)."""

    def __init__(self, ranges: tuple[OffsetRange, ...]):
        super().__init__(ranges)
        self.ranges = ranges


PEM_FILE_SETTINGS = {"ssl.ca.location": "ssl.ca.pem", "ssl.certificate.location": "ssl.certificate.pem",
                     "ssl.key.location": "ssl.key.pem"}


def idle_wait_s(now_ms: float, trigger_interval_ms: int) -> float:
    """How long an idle planner may wait for a new assignment (:meth:`AssignedKafkaReader.latestOffset`)
    at wall-clock time ``now_ms`` under a processing-time trigger of ``trigger_interval_ms``.
    Spark starts such triggers at the multiples of the interval (``ProcessingTimeExecutor``,
    wall clock; a late one at once): the wait ends :data:`IDLE_WAIT_MARGIN_MS` (at most a fifth
    of the interval) before the next multiple, so an idle trigger never runs into the next one,
    and lasts at most :data:`IDLE_WAIT_MAX_MS`. No wait without an interval (Spark plans again
    at once then)."""
    if trigger_interval_ms <= 0:
        return 0.0
    boundary = (now_ms // trigger_interval_ms + 1) * trigger_interval_ms
    margin = min(IDLE_WAIT_MARGIN_MS, trigger_interval_ms / 5)
    return max(0.0, min(boundary - margin - now_ms, IDLE_WAIT_MAX_MS)) / 1000


def assigned_source_options(client_config: Mapping[str, object], assignment_file: str | os.PathLike,
                            source, task_slots: int = 1, trigger_interval_ms: int | None = None) -> dict[str, str]:
    """:func:`source_options` for a pipeline's ``source`` section (``SourceSpec``): its rate
    limits, and the TLS files given by path read here, on the driver, and passed inline
    (``ssl.*.pem``), so executors need not have them (as Spark's Kafka source does with its
    inline PEM stores); ``trigger_interval_ms``: the query's processing-time interval (None:
    none), which an idle planner's wait follows (:func:`idle_wait_s`)."""
    config = dict(client_config)
    for location, inline in PEM_FILE_SETTINGS.items():
        path = config.pop(location, None)
        if path:
            config[inline] = Path(str(path)).read_text()
    limits = RateLimits(source.max_offsets_per_trigger, source.min_offsets_per_trigger,
                        source.max_trigger_delay_ms or RateLimits.max_delay_ms)
    return source_options(config, assignment_file, limits, include_headers=source.include_headers,
                          task_slots=task_slots, trigger_interval_ms=trigger_interval_ms or 0)


def source_options(client_config: Mapping[str, object], assignment_file: str | os.PathLike,
                   limits: RateLimits, *, include_headers: bool = False, task_slots: int = 1,
                   trigger_interval_ms: int = 0) -> dict[str, str]:
    """The options of :class:`AssignedKafkaSource` for librdkafka ``client_config`` (secrets
    revealed: Spark redacts them by name, see ``spark_session.OPTION_REDACTION``); ``task_slots``:
    the cores the application runs tasks on (``SparkContext.defaultParallelism``);
    ``trigger_interval_ms``: the query's processing-time interval (0: none; :func:`idle_wait_s`)."""
    options = {f"{KAFKA_PREFIX}{k}": str(v) for k, v in client_config.items()}
    options[ASSIGNMENT_OPTION] = str(assignment_file)
    options[HEADERS_OPTION] = str(include_headers).lower()
    options[SLOTS_OPTION] = str(max(1, int(task_slots)))
    options[TRIGGER_OPTION] = str(max(0, int(trigger_interval_ms)))
    if limits.max_rows is not None:
        options["maxOffsetsPerTrigger"] = str(limits.max_rows)
    if limits.min_rows is not None:
        options["minOffsetsPerTrigger"] = str(limits.min_rows)
        options["maxTriggerDelayMs"] = str(limits.max_delay_ms)
    return options


def reader_client_config(options: Mapping[str, str]) -> dict[str, str]:
    """The librdkafka settings the source's options give its readers (and its planner)."""
    config = {k[len(KAFKA_PREFIX):]: v for k, v in options.items() if k.startswith(KAFKA_PREFIX)}
    # Spark's Kafka source reads with the Java client's default; librdkafka's is read_committed
    config.setdefault("isolation.level", "read_uncommitted")
    return config


def _headers(options: Mapping[str, str]) -> bool:
    return options.get(HEADERS_OPTION, "false").strip().lower() == "true"


class AssignedKafkaSource(DataSource):
    """The data source registered as ``scg-kafka`` (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        """The rows of Spark's Kafka source. Asked where the query is defined, not by the
        planner process Spark starts at each query start, which therefore never imports the
        record module (its Spark SQL columns and decoders)."""
        from pipelines.runtime.records import kafka_row_ddl

        return kafka_row_ddl(_headers(self.options))

    def streamReader(self, schema) -> AssignedKafkaReader:
        return AssignedKafkaReader(self.options)


class AssignedKafkaReader(DataSourceStreamReader):
    """Plans on the driver, reads on the executors (see the module docstring). The planner's
    methods run in one long-lived process per query, one call at a time."""

    def __init__(self, options: Mapping[str, str], probe=None):
        """``probe``: how the planner asks the brokers for log ends (default: a BrokerProbe made
        at first use from the ``kafka.*`` options)."""
        self.client_config = reader_client_config(options)
        self.assignment_file = AssignmentFile(options[ASSIGNMENT_OPTION])
        self.headers = _headers(options)
        self.task_slots = max(1, int(options.get(SLOTS_OPTION, "1")))
        self.trigger_interval_ms = max(0, int(options.get(TRIGGER_OPTION, "0")))
        self._planned = False  # the query's first trigger waits for nothing (see latestOffset)
        max_rows = options.get("maxOffsetsPerTrigger")
        min_rows = options.get("minOffsetsPerTrigger")
        self.limits = RateLimits(int(max_rows) if max_rows else None, int(min_rows) if min_rows else None,
                                 int(options.get("maxTriggerDelayMs", RateLimits.max_delay_ms)))
        self._probe = probe
        self._last_batch_ms = time.time() * 1000
        self._unanswered_since: dict[TopicPartition, float] = {}

    # -- planning (driver) ------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        return INITIAL.to_dict()

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.limits.max_rows) if self.limits.max_rows is not None else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        """The next batch's end: the claims of the assignment file, each partition up to its
        log end within ``limit``; ``start`` when there is nothing to plan now (no record to
        read and no claim changed, or ``minOffsetsPerTrigger`` holds the batch back). Then,
        except in the query's first trigger (the runner may wait for it to be planned), it
        waits for the runner to write a new assignment until shortly before the next trigger is
        due (:func:`idle_wait_s`) and plans on it: partitions claimed while the query is idle (a
        member that just joined, or rebalanced while no record came) are read in this trigger,
        not the next. A change missed by :meth:`AssignmentFile.version` waits for the next one.
        A query stopped meanwhile stops once the wait ends."""
        wait_s = idle_wait_s(time.time() * 1000, self.trigger_interval_ms) if self._planned else 0.0
        self._planned = True
        deadline = time.monotonic() + wait_s
        while True:
            version = self.assignment_file.version()
            latest, idle = self._latest(start, limit)
            if not idle or wait_s <= 0 or not self.assignment_file.wait_for_change(version, deadline):
                return latest

    def _latest(self, start: dict, limit) -> tuple[dict, bool]:
        """The next batch's end, and whether the query is idle: no claim changed and no
        record is to be read now."""
        previous = SourceOffset.from_dict(start)
        assignment = self.assignment_file.read()
        log_ends = self._log_ends(list(assignment.claims))
        capped = isinstance(limit, ReadMaxRows)
        plan = plan_next(previous, assignment, log_ends, limit.max_rows if capped else None)
        if plan.behind:
            tp, (stands, log_end) = min(plan.behind.items())
            raise KafkaDataLoss(tp, f"the query stands at offset {stands} but the log now ends at {log_end}")
        now_ms = time.time() * 1000
        moved = plan.offset.claims != previous.claims
        if not moved and not isinstance(limit, ReadAllAvailable) and \
                delay_batch(plan.ready(previous), self.limits, self._last_batch_ms, now_ms):
            return start, True
        if plan.ready(previous) > 0 or moved:
            self._last_batch_ms = now_ms
            return plan.offset.to_dict(), False
        return plan.offset.to_dict(), True

    def partitions(self, start: dict, end: dict):
        """The batch's ranges grouped into tasks for the cores the application has now (as the
        runner last wrote them, else the ``taskSlots`` option: the cores at query start)."""
        ranges = batch_ranges(SourceOffset.from_dict(start), SourceOffset.from_dict(end))
        slots = self.assignment_file.read().task_slots or self.task_slots
        return [RangesPartition(group) for group in task_groups(ranges, slots)]

    def commit(self, end: dict) -> None:
        """Nothing: the Delta table holds the offsets (the batch writer commits them)."""

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.close()

    # -- reading (executors) ----------------------------------------------------------------------
    def read(self, partition: RangesPartition):
        with task_gc():
            for rng in partition.ranges:
                yield from read_range(self.client_config, rng, headers=self.headers)

    # -- internals --------------------------------------------------------------------------------
    def _log_ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Log ends (last stable offsets under ``read_committed``); a partition the brokers do
        not answer for is left out (it keeps its place) for up to ``LOG_END_GRACE_S``, the admin
        client being replaced after each such answer (its metadata may predate the partition)."""
        from pipelines.runtime.broker_probe import BrokerProbe

        if self._probe is None:
            admin = {k: v for k, v in self.client_config.items() if k != "isolation.level"}
            self._probe = BrokerProbe(admin)
        committed_only = self.client_config.get("isolation.level") == "read_committed"
        found, errors = self._probe.log_ends(partitions, committed_only=committed_only)
        if errors:  # e.g. a partition added to a topic: a new client starts from fresh metadata
            self._probe.close()
        now = time.monotonic()
        self._unanswered_since = {tp: t for tp, t in self._unanswered_since.items() if tp in errors}
        for tp in partitions:
            if tp in found:
                self._unanswered_since.pop(tp, None)
            elif now - self._unanswered_since.setdefault(tp, now) >= LOG_END_GRACE_S:
                raise LogEndsUnavailable(f"[{errors[tp]}] the log end of {tp.topic}-{tp.partition} was not "
                                         f"available for {LOG_END_GRACE_S:.0f}s")
        return found

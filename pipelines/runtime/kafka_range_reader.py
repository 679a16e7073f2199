"""Read one planned offset range of one partition into Arrow record batches (runs on executors).

The rows have the columns and types of Spark's Kafka source (``KAFKA_ROW_DDL``: key, value,
topic, partition, offset, timestamp, timestampType; and ``headers`` as with ``includeHeaders``:
the record's headers in produced order, null when it has none), so the batch path cannot tell the
two sources apart. Reading follows the consumer's ``isolation.level``: with ``read_committed`` aborted
records and transaction markers are skipped, and the planned end never passes the last stable
offset (the planner asks for it with the same isolation level).

Guarantees, offsets being next-offset-to-read (docs/DESIGN.md, invariant 2):

* every record with ``start <= offset < end`` that the log still holds is yielded once, in offset
  order; nothing at or past ``end`` is;
* a gap is accepted only where the log itself has none to give (compaction, transaction markers,
  aborted records); records deleted before they were read — the partition's earliest offset has
  passed the one wanted, or the log ends before ``end`` (truncation) — raise
  :class:`KafkaDataLoss`, which names the partition and the lost offsets (the runner applies the
  pipeline's ``on_data_loss`` to it, as with Spark's ``failOnDataLoss``);
* a consumer that makes no progress for ``replace_after_s`` is closed and a new one (fresh
  connections and metadata) goes on from the offset reached: librdkafka's consumer that knew a
  topic before it was deleted and created again never fetches the new topic's partitions;
* a read that makes no progress for ``stall_timeout_s`` raises :class:`KafkaReadStalled` (the
  query fails and the runner restarts it from the table's offsets);
* the consumer never joins a group and never commits: offsets live in the Delta table;
* a consumer serves one range at a time; between ranges it is kept (:class:`RangeConsumers`)
  unassigned, with nothing of the previous range left to consume.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa

from groupmgr.core import OffsetRange, ScgError, TopicPartition

log = logging.getLogger(__name__)

KAFKA_ROW_ARROW = pa.schema([
    pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
])  # what Spark expects from a Python source declaring KAFKA_ROW_DDL (to_arrow_schema, UTC)
HEADERS_ARROW = pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()),
                                                        pa.field("value", pa.binary())])))
KAFKA_ROW_WITH_HEADERS_ARROW = KAFKA_ROW_ARROW.append(HEADERS_ARROW)  # records.kafka_row_ddl(True)
FETCH_ROWS = 10_000          # records per consume() call and at most per Arrow batch
STALL_TIMEOUT_S = 120.0      # Spark's kafkaConsumer.pollTimeoutMs
REPLACE_AFTER_S = 10.0       # a consumer silent this long is replaced (a healthy one answers in ms)
FETCH_DEFAULTS = {           # the pipeline's client settings may change these
    # how long librdkafka waits before it looks again at a partition whose local queue was full.
    # Its default (1 s) idles a reader that drains the queue as fast as it fills; at 0 its broker
    # thread spins while the task decodes and writes, burning as much CPU as the task itself
    "fetch.queue.backoff.ms": 5,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 256 * 1024,
    # prefetch about one Arrow batch ahead (default 100,000 records): what is fetched past a
    # range's end is read for nothing (20,000 x 200 B on loopback, the bound at 20,000: 0.103 s
    # instead of 0.146 s)
    "queued.min.messages": FETCH_ROWS,
    # the fetch left waiting at the end of the log (default 500 ms) holds up the next range's
    # first fetch on a kept consumer
    "fetch.wait.max.ms": 10,
}
READER_SETTINGS = {          # fixed: this consumer only reads an assigned range
    "group.id": "scg-range-reader",  # required by librdkafka; never joined (assign only)
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
}


class KafkaDataLoss(ScgError):
    """Records planned for a micro-batch are gone from the log (retention or truncation)."""

    condition = "KAFKA_DATA_LOSS"

    def __init__(self, tp: TopicPartition, detail: str):
        self.tp = tp
        super().__init__(f"[KAFKA_DATA_LOSS] {tp.topic}-{tp.partition}: {detail}. Some data may have been lost")


def _lost(rng: OffsetRange, first_missing: int, why: str) -> KafkaDataLoss:
    return KafkaDataLoss(rng.tp, f"offsets from {first_missing} were planned (range [{rng.start}, {rng.end})) "
                                 f"but {why}")


class LogEndsUnavailable(ScgError):
    """The brokers did not give some partitions' log ends for a while (the scg-kafka planner's
    ``LOG_END_GRACE_S``): transient, the runner restarts the query after a backoff."""

    condition = "LOG_END_UNAVAILABLE"


class KafkaReadStalled(ScgError):
    """The brokers gave no record and no end of log for too long: transient, the runner restarts
    the query from the table's offsets after a backoff."""

    condition = "KAFKA_READ_STALLED"

    def __init__(self, rng: OffsetRange, at: int, waited_s: float):
        super().__init__(f"[KAFKA_READ_STALLED] {rng.topic}-{rng.partition}: no progress at offset {at} for "
                         f"{waited_s:.0f}s while reading [{rng.start}, {rng.end}) (TimeoutException)")


class RangeConsumers:
    """Range-reading consumers kept between the ranges one process reads, as Spark's Kafka source
    keeps its consumers: a Spark Python worker reads many ranges one after another
    (``spark.python.worker.reuse``), and a kept consumer skips the connection, the TLS and SASL
    handshakes and the bootstrap metadata of a new one (30 records from one partition on loopback,
    median of 15 reads: SASL_SSL SCRAM-SHA-512 70 ms with a new consumer, 15 ms with a kept one;
    without security about 25 ms saved).

    A consumer is given back only after a read that ended without an error, and unassigned first
    (librdkafka drops what it prefetched for the partition); one whose read raised is closed. At
    most ``per_settings`` wait per set of client settings, none reused after ``idle_s`` idle (it is
    closed at the next take). The settings are the key, credentials included: held in memory only.
    Thread safe. A forked child starts with none (librdkafka's threads do not survive a fork)."""

    def __init__(self, factory: Callable[[dict], object] | None = None, per_settings: int = 2,
                 idle_s: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self._factory, self.per_settings, self.idle_s, self._clock = factory, per_settings, idle_s, clock
        self._idle: dict[tuple, list[tuple[float, object]]] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def take(self, config: Mapping[str, object]):
        """A consumer with ``config``: a kept one, or a new one (and every consumer idle past
        ``idle_s`` is closed, whatever its settings)."""
        with self._lock:
            self._forget_after_fork()
            now, stale = self._clock(), []
            for waiting in self._idle.values():
                stale += [c for since, c in waiting if now - since > self.idle_s]
                waiting[:] = [(since, c) for since, c in waiting if now - since <= self.idle_s]
            waiting = self._idle.get(_settings_key(config))
            consumer = waiting.pop()[1] if waiting else None
        for old in stale:
            _close_quietly(old)
        return consumer if consumer is not None else self.new(config)

    def new(self, config: Mapping[str, object]):
        """A new consumer with ``config``, never a kept one."""
        if self._factory is None:
            from confluent_kafka import Consumer
            return Consumer(dict(config))
        return self._factory(dict(config))

    def give_back(self, config: Mapping[str, object], consumer) -> None:
        """Keep ``consumer`` (its read ended cleanly) for the next range with ``config``."""
        try:
            consumer.unassign()
        except Exception:  # noqa: BLE001 - a consumer that cannot let go of its range is not kept
            _close_quietly(consumer)
            return
        with self._lock:
            self._forget_after_fork()
            waiting = self._idle.setdefault(_settings_key(config), [])
            if len(waiting) < self.per_settings:
                waiting.append((self._clock(), consumer))
                return
        _close_quietly(consumer)

    def close_all(self) -> None:
        """Close every kept consumer."""
        with self._lock:
            kept = [c for waiting in self._idle.values() for _, c in waiting]
            self._idle.clear()
        for consumer in kept:
            _close_quietly(consumer)

    def _forget_after_fork(self) -> None:
        if self._pid != os.getpid():
            self._idle, self._pid = {}, os.getpid()


KEPT_CONSUMERS = RangeConsumers()  # this process's: a Spark Python worker's, between its tasks
atexit.register(KEPT_CONSUMERS.close_all)


def _settings_key(config: Mapping[str, object]) -> tuple:
    return tuple(sorted((str(k), repr(v)) for k, v in config.items()))


def _close_quietly(consumer) -> None:
    try:
        consumer.close()
    except Exception:  # noqa: BLE001 - closing a consumer nobody will use again
        pass


def read_range(client_config: Mapping[str, object], rng: OffsetRange, *, headers: bool = False,
               consumers: RangeConsumers | None = None, fetch_rows: int = FETCH_ROWS,
               stall_timeout_s: float = STALL_TIMEOUT_S, replace_after_s: float = REPLACE_AFTER_S,
               clock=time.monotonic) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches of at most ``fetch_rows`` rows, with the
    ``headers`` column when asked. ``client_config``: librdkafka settings (bootstrap, security,
    ``isolation.level``); ``consumers``: where the consumer comes from and goes back to (default
    :data:`KEPT_CONSUMERS`)."""
    if rng.end <= rng.start:
        return
    from confluent_kafka import TopicPartition

    consumers = KEPT_CONSUMERS if consumers is None else consumers
    config = {**FETCH_DEFAULTS, **client_config, **READER_SETTINGS}
    consumer = consumers.take(config)
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        expected, end = rng.start, rng.end
        last_progress = consumer_since = clock()
        while expected < end:
            # consume() waits for as many events as asked (or the timeout): never ask for more than
            # the range still holds (a record past the end or the end of the log is an event too)
            messages = consumer.consume(min(fetch_rows, end - expected), 1.0)
            keys, values, offsets, times, header_lists = [], [], [], [], [] if headers else None
            add_key, add_value, add_offset, add_time = keys.append, values.append, offsets.append, times.append
            for message in messages:  # the hot loop: about a microsecond per record
                error = message.error()
                if error is not None:
                    expected = _on_error(consumer, rng, expected, message, error)
                    if expected >= end:
                        break
                    continue
                offset = message.offset()
                if offset >= end:
                    expected = end
                    break
                if offset != expected:
                    if offset < expected or message.partition() != rng.partition or message.topic() != rng.topic:
                        raise RuntimeError(f"{message.topic()}-{message.partition()}@{offset} arrived while "
                                           f"reading {rng.topic}-{rng.partition} at {expected}")
                    _check_gap(consumer, rng, expected)
                add_key(message.key())
                add_value(message.value())
                add_offset(offset)
                add_time(message.timestamp())
                if header_lists is not None:
                    header_lists.append(message.headers())
                expected = offset + 1
            if offsets:
                yield _record_batch(rng, keys, values, offsets, times, header_lists)
            now = clock()
            if messages:
                last_progress = now
            elif now - last_progress >= stall_timeout_s:
                raise KafkaReadStalled(rng, expected, now - last_progress)
            elif now - max(last_progress, consumer_since) >= replace_after_s:
                log.warning("%s-%s: no record for %.0fs at offset %d; a new consumer goes on from there",
                            rng.topic, rng.partition, now - max(last_progress, consumer_since), expected)
                _close_quietly(consumer)
                consumer, consumer_since = consumers.new(config), now
                consumer.assign([TopicPartition(rng.topic, rng.partition, expected)])
    except BaseException:  # an error, or the task ended before the range did: not kept
        _close_quietly(consumer)
        raise
    consumers.give_back(config, consumer)


_TIMESTAMP_PAIR = pa.struct([pa.field("type", pa.int32()), pa.field("ms", pa.int64())])  # librdkafka's


def _record_batch(rng: OffsetRange, keys: list, values: list, offsets: list, times: list,
                  header_lists: list | None = None) -> pa.RecordBatch:
    """One Arrow batch in :data:`KAFKA_ROW_ARROW`, or :data:`KAFKA_ROW_WITH_HEADERS_ARROW` when
    ``header_lists`` holds each record's ``[(key, value), ...]`` or None; ``times`` holds
    librdkafka's ``(type, ms)`` (type 0 none, 1 create time, 2 log append time; Kafka's ids are
    one less, -1 for none)."""
    import pyarrow.compute as pc

    n = len(offsets)
    pairs = pa.array(times, _TIMESTAMP_PAIR)
    kind, millis = pairs.field(0), pairs.field(1)
    stamps = millis.cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
    no_time = pc.equal(kind, 0)
    if pc.any(no_time).as_py():
        stamps = pc.if_else(no_time, pa.scalar(None, stamps.type), stamps)
    columns = [pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
               pa.repeat(pa.scalar(rng.topic, pa.string()), n), pa.repeat(pa.scalar(rng.partition, pa.int32()), n),
               pa.array(offsets, pa.int64()), stamps, pc.subtract(kind, 1)]
    if header_lists is None:
        return pa.RecordBatch.from_arrays(columns, schema=KAFKA_ROW_ARROW)
    # librdkafka gives None for a record without headers, as Spark's source gives null
    columns.append(pa.array(header_lists, HEADERS_ARROW.type))
    return pa.RecordBatch.from_arrays(columns, schema=KAFKA_ROW_WITH_HEADERS_ARROW)


def _on_error(consumer, rng: OffsetRange, expected: int, message, error) -> int:
    """The offset reading stands at after an error event: the end of log when it covers the
    range; data loss otherwise; other errors raise as the client's exception."""
    from confluent_kafka import KafkaError, KafkaException

    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        if message.topic() != rng.topic or message.partition() != rng.partition:
            return expected  # another partition's end: left from a kept consumer's previous range
        log_end = message.offset()
        if log_end >= rng.end:
            return rng.end
        earliest = _earliest(consumer, rng)
        if earliest is not None and earliest > expected:
            raise _lost(rng, expected, f"the log now starts at {earliest}")
        raise _lost(rng, max(expected, log_end), f"the log ends at {log_end}")
    if code == KafkaError._AUTO_OFFSET_RESET or code == KafkaError.OFFSET_OUT_OF_RANGE:
        earliest = _earliest(consumer, rng)
        raise _lost(rng, expected, "the offset is out of the log's range"
                    + (f" (it starts at {earliest})" if earliest is not None else ""))
    if error.retriable() or not error.fatal():
        return expected  # librdkafka retries transient fetch errors itself
    raise KafkaException(error)


def _check_gap(consumer, rng: OffsetRange, expected: int) -> None:
    """A record past ``expected`` arrived: fine when the log still starts at or before
    ``expected`` (compaction, markers, aborted records), data loss when it starts after."""
    earliest = _earliest(consumer, rng)
    if earliest is not None and earliest > expected:
        raise _lost(rng, expected, f"the log now starts at {earliest}")


def _earliest(consumer, rng: OffsetRange) -> int | None:
    from confluent_kafka import TopicPartition

    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(rng.topic, rng.partition),
                                                    timeout=10.0, cached=False)
        return low if low >= 0 else None
    except Exception:  # noqa: BLE001 - unknown: the gap is not called a loss on a guess
        return None

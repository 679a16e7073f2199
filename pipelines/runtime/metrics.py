"""A member's Prometheus metrics and its health endpoints, served on one HTTP port.

Every family is named ``scg_<noun>_<unit>`` and labelled by ``pipeline``, ``group`` and
``member`` (never by a secret or a record value). Executors' work is counted on the driver from
each committed batch's report: nothing runs per record. Gauges of the member's state (owned and
stopped partitions, generation) are set by the runner's main loop; a scrape reads the last values
at once and never waits for a rebalance, a broker or a batch.

``/metrics`` is the Prometheus text format (``prometheus_client``); ``/healthz`` answers 200 while
the member's thread runs and nothing ended it; ``/readyz`` answers 200 once the member joined its
group and its query reads every owned partition that can run (or it deliberately owns none).
"""
from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, make_wsgi_app

from groupmgr.core import ExitCategory, ScgError, TopicPartition

log = logging.getLogger("scg.metrics")
LABELS = ("pipeline", "group", "member")
# batches take from tens of milliseconds (an idle trigger) to minutes (a backlog's first batch)
BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
COMMIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class MetricsPortInUse(ScgError):
    """The configured ``metrics.port`` is taken (another member on this host, another program)."""

    condition = "METRICS_PORT_IN_USE"
    exit_category = ExitCategory.ENVIRONMENT


class MemberMetrics:
    """The metric families of one member, in a registry of its own (several members may share a
    process). Thread safe: the query thread reports batches, the main loop sets the gauges."""

    def __init__(self, pipeline: str, group: str, member: str, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        self._labels = {"pipeline": pipeline, "group": group, "member": member}
        r = self.registry
        self._lag = Gauge("scg_partition_lag_records", "Records in the log past the table's offset, per partition "
                          "(log end minus next offset to read), as of the partition's last batch",
                          LABELS + ("topic", "partition"), registry=r)
        self._batch = Histogram("scg_batch_duration_seconds", "Micro-batch time from planned ranges to the "
                                "Kafka commit", LABELS, buckets=BATCH_BUCKETS, registry=r)
        self._commit = Histogram("scg_delta_commit_seconds", "Time in the Delta commits of a batch (both "
                                 "tables, files excluded)", LABELS, buckets=COMMIT_BUCKETS, registry=r)
        self._records = Counter("scg_records_written", "Rows committed to a Delta table (replays excluded)",
                                LABELS + ("table",), registry=r)
        self._merged = Counter("scg_upsert_rows", "Rows an upsert table's merges inserted, updated and deleted",
                               LABELS + ("change",), registry=r)
        self._dead = Counter("scg_dead_letters", "Records committed to the dead-letter table, by reason",
                             LABELS + ("reason",), registry=r)
        self._rebalances = Counter("scg_rebalances", "Assignments received from the group", LABELS, registry=r)
        self._restarts = Counter("scg_query_restarts", "Query starts and restarts after a failure, by the "
                                 "failure's condition", LABELS + ("reason",), registry=r)
        self._commit_failures = Counter("scg_kafka_commit_failures", "Offset commits the group refused (the "
                                        "Delta table still holds the offsets)", LABELS, registry=r)
        self._generation = Gauge("scg_member_generation", "The group generation of the last assignment",
                                 LABELS, registry=r)
        self._owned = Gauge("scg_owned_partitions", "Partitions this member owns", LABELS, registry=r)
        self._stopped = Gauge("scg_stopped_partitions", "Owned partitions left out of the query, by condition",
                              LABELS + ("condition",), registry=r)
        self._info = Info("scg_member", "What this member runs", LABELS, registry=r)
        self._lock = threading.Lock()
        self._lagging: set[TopicPartition] = set()
        self._stopped_conditions: set[str] = set()
        for table in ("output", "dead_letter"):
            self._records.labels(**self._labels, table=table)
        for family in (self._rebalances, self._commit_failures):
            family.labels(**self._labels)

    def describe(self, **info: str) -> None:
        """What the member runs (version, assignors, reader, protocol): ``scg_member_info``."""
        self._info.labels(**self._labels).info({k: str(v) for k, v in info.items()})

    # -- events ---------------------------------------------------------------------------------
    def batch(self, report, lag: Mapping[TopicPartition, int]) -> None:
        """A committed batch (``BatchReport``) and the lag of its partitions after it."""
        self._batch.labels(**self._labels).observe(report.duration_s)
        self._commit.labels(**self._labels).observe(report.commit_s)
        self._records.labels(**self._labels, table="output").inc(report.rows_written)
        self._records.labels(**self._labels, table="dead_letter").inc(report.dead_letters)
        for reason, count in report.dead_letter_reasons.items():
            self._dead.labels(**self._labels, reason=reason or "unknown").inc(count)
        for change, count in report.merged.items():
            self._merged.labels(**self._labels, change=change).inc(count)
        with self._lock:
            for tp, records in lag.items():
                self._lag.labels(**self._labels, topic=tp.topic, partition=str(tp.partition)).set(records)
                self._lagging.add(tp)

    def assigned(self, generation_id: int) -> None:
        self._rebalances.labels(**self._labels).inc()
        self._generation.labels(**self._labels).set(generation_id)

    def restarting(self, condition: str) -> None:
        self._restarts.labels(**self._labels, reason=condition).inc()

    def commit_refused(self) -> None:
        self._commit_failures.labels(**self._labels).inc()

    # -- state (main loop) ----------------------------------------------------------------------
    def partitions(self, owned: Iterable[TopicPartition], stopped: Mapping[TopicPartition, str]) -> None:
        """The owned partitions now and the condition of each stopped one; the lag of a partition
        no longer owned is dropped."""
        owned = set(owned)
        by_condition: dict[str, int] = {}
        for condition in stopped.values():
            by_condition[condition] = by_condition.get(condition, 0) + 1
        with self._lock:
            self._owned.labels(**self._labels).set(len(owned))
            for condition in self._stopped_conditions - set(by_condition):
                self._stopped.remove(*self._labels.values(), condition)
            for condition, count in by_condition.items():
                self._stopped.labels(**self._labels, condition=condition).set(count)
            self._stopped_conditions = set(by_condition)
            for tp in self._lagging - owned:
                self._lag.remove(*self._labels.values(), tp.topic, str(tp.partition))
            self._lagging &= owned


@dataclass(frozen=True)
class Probe:
    """One health answer: ``ok`` and why (shown in the body)."""

    ok: bool
    reason: str


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - the stdlib's name
        log.debug("%s - %s", self.address_string(), format % args)


class MetricsServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0: a free one,
    :attr:`port` tells which) from a daemon thread. ``healthy()``/``ready()`` answer a probe;
    they must not block."""

    def __init__(self, registry: CollectorRegistry, healthy: Callable[[], Probe], ready: Callable[[], Probe],
                 host: str = "0.0.0.0", port: int = 0):
        self._metrics = make_wsgi_app(registry)
        self._healthy, self._ready = healthy, ready
        self.host, self._wanted = host, port
        self._server: _Server | None = None

    @property
    def port(self) -> int | None:
        return self._server.server_port if self._server is not None else None

    def start(self) -> MetricsServer:
        """Bind and serve; raises MetricsPortInUse when the port is taken."""
        try:
            self._server = make_server(self.host, self._wanted, self._app, _Server, _QuietHandler)
        except OSError as exc:
            raise MetricsPortInUse(f"metrics.port {self._wanted} on {self.host or '*'} cannot be used ({exc.strerror}); "
                                   "choose another port, or 0 for a free one") from None
        threading.Thread(target=self._server.serve_forever, name="scg-metrics", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _app(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            answer = (self._healthy if path == "/healthz" else self._ready)()
            start_response("200 OK" if answer.ok else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8")])
            return [f"{'ok' if answer.ok else 'not ok'}: {answer.reason}\n".encode()]
        if path == "/metrics":
            return self._metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"/metrics, /healthz or /readyz\n"]


def member_label(instance_id: str | None) -> str:
    """The ``member`` label: the static member's ``group.instance.id``, else ``host-pid`` (stable
    for the process's life, unlike the member id the coordinator gives at each join)."""
    import os

    return instance_id or f"{socket.gethostname()}-{os.getpid()}"

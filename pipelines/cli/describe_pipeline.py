"""`scg describe`: a group's state, members, committed offsets and lag as Kafka sees them, and,
for a pipeline file, next to them each partition's Delta version (the table's next offset).

Lag for a pipeline is log-end minus the Delta version: the table, not the Kafka commit, is the
source of truth (the Kafka commit follows each Delta commit and can only trail it). A partition
its owner has stopped (a condition such as ``KAFKA_DATA_LOSS`` or ``LEADER_NOT_AVAILABLE``, see
:mod:`pipelines.runtime.partition_checks`) shows ``stopped: <CONDITION> ...`` in STATUS, read from
the metadata of its Kafka commit."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from groupmgr.core import TopicPartition
from groupmgr.describe import DescribeFailed, describe_group, format_table, to_json
from pipelines.cli.arguments import BadArgumentsError
from pipelines.runtime.kafka_access import SilentLogger
from pipelines.runtime.partition_checks import STOPPED_METADATA

QUIET = {"log_level": 0, "logger": SilentLogger()}  # librdkafka's own log lines are not printed


@dataclass(frozen=True)
class PipelinePartition:
    """One partition of a pipeline: the table's next offset (Delta version), the group's committed
    offset, log end, lag against the table, owner."""

    topic: str
    partition: int
    delta_version: int | None
    committed: int | None
    log_end: int | None
    lag: int | None
    owner: str | None
    status: str = ""   # "" while it flows; "stopped: <CONDITION>: <detail>" when its owner stopped it




REACH_TIMEOUT_S = 10.0  # how long describe waits for a first answer before it names why there is none


def _plaintext(bootstrap: str):
    """The ``kafka`` section of ``--bootstrap HOST:PORT[,...]``: those brokers, no security."""
    from pipelines.config.model import KafkaConfig

    return KafkaConfig(bootstrap_servers=tuple(s.strip() for s in bootstrap.split(",") if s.strip()))


def describe_command(args) -> int:
    """``scg describe``. Before describing, the brokers are reached as ``--config``'s security
    says (none with ``--bootstrap``): a refusal or no answer is one named line, and librdkafka's
    own log lines are never printed."""
    if args.pipeline:
        return _describe_pipeline(args.pipeline, args.json)
    if not args.group:
        raise BadArgumentsError("scg describe: give a GROUP or --pipeline FILE")
    if getattr(args, "config", None):
        desc = _describe_with(args.config, args.group)
    else:
        _reach(_plaintext(args.bootstrap), args.group,
               "the brokers need security: give --config FILE (a pipeline file with their kafka section)")
        desc = describe_group(args.bootstrap, args.group, dict(QUIET))
    print(json.dumps(to_json(desc), indent=2) if args.json else format_table(desc))
    return 0


def _describe_with(path: str, group: str):
    """``group`` described over the brokers and security of the pipeline file at ``path``."""
    from pipelines.config import load_pipeline
    from pipelines.runtime.membership import member_config_for

    config = load_pipeline(path)
    _reach(config.kafka, group, f"check the kafka section of {path}")
    client = {k: v for k, v in config.kafka.confluent_config().items() if k != "bootstrap.servers"}
    return describe_group(config.kafka.bootstrap_string, group, {**client, **QUIET},
                          client_kwargs=member_config_for(config).client_kwargs)


def _reach(kafka, group: str, hint: str) -> None:
    """Return once a broker answered as ``kafka`` says; raise the named refusal (with ``hint``),
    or DESCRIBE_FAILED when none answered within :data:`REACH_TIMEOUT_S`."""
    from pipelines.runtime.kafka_access import KafkaAccess, KafkaAccessError

    access = KafkaAccess(kafka, group, REACH_TIMEOUT_S)
    try:
        if not access.connect():
            raise DescribeFailed(group, TimeoutError(f"no broker at {kafka.bootstrap_string} could be reached "
                                                     f"within {REACH_TIMEOUT_S:.0f} s"))
    except KafkaAccessError as exc:  # connect's refusals are each made from one message
        raise type(exc)(f"{exc}; {hint}") from None
    finally:
        access.close()


def _describe_pipeline(path: str, as_json: bool) -> int:
    from pipelines.config import load_pipeline
    from pipelines.runtime.membership import member_config_for, resolve_topics
    from pipelines.runtime.broker_probe import log_end_offsets
    from pipelines.runtime.start_offsets import lowest_recorded
    from sinks.data_files import unreferenced_files
    from sinks.txn_table import read_recorded_offsets

    config = load_pipeline(path)
    _reach(config.kafka, config.group.id, f"check the kafka section of {path}")
    client = {k: v for k, v in config.kafka.confluent_config().items() if k != "bootstrap.servers"}
    desc = describe_group(config.kafka.bootstrap_string, config.group.id, {**client, **QUIET},
                          client_kwargs=member_config_for(config).client_kwargs)
    partitions = _topic_partitions(config, resolve_topics(config))
    outputs = [table.path for table in config.sink.output_tables(config.transform)]
    storage = config.storage.delta_storage_options()
    delta = lowest_recorded([read_recorded_offsets(table, config.name, partitions, storage) for table in outputs])
    log_end = log_end_offsets(config.kafka.confluent_config(), partitions)  # unanswered: no lag shown
    group = {(p.topic, p.partition): p for p in desc.partitions}
    rows = [_row(tp, delta.get(tp), group.get(tuple(tp)), log_end.get(tp)) for tp in partitions]
    orphans = {path: _unreferenced(unreferenced_files, path, config.storage.delta_storage_options())
               for path in (*outputs, config.sink.dead_letter_path)}
    if as_json:
        print(json.dumps({"group": to_json(desc), "table": config.sink.path, "tables": outputs,
                          "partitions": [asdict(r) for r in rows],
                          "unreferenced_files": orphans}, indent=2))
    else:
        print(format_table(desc))
        print(f"\nDelta table {config.sink.path}" if len(outputs) == 1 else
              f"\nDelta tables {', '.join(outputs)} (DELTA-VERSION: the lowest any of them holds)")
        print(_table(rows))
        for path, found in orphans.items():
            if found and found["count"]:
                print(f"{path}: {found['count']} unreferenced data file(s), {found['bytes']} bytes "
                      "(from retried tasks or a stop between write and commit; a full VACUUM removes them)")
    return 0


def _unreferenced(report, path, options) -> dict | None:
    """The table's unreferenced files, or None when the table does not exist yet."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return asdict(report(path, options))
    except TableNotFoundError:
        return None


def _topic_partitions(config, topics) -> list[TopicPartition]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({**config.kafka.confluent_config(), **QUIET}).list_topics(timeout=30)
    return sorted(TopicPartition(t, p) for t in topics if t in metadata.topics
                  for p in metadata.topics[t].partitions)


def _row(tp, delta_version, group_row, log_end) -> PipelinePartition:
    lag = None if log_end is None else log_end - (delta_version or 0)
    metadata = getattr(group_row, "metadata", "") or ""
    status = "stopped: " + metadata.removeprefix(STOPPED_METADATA) if metadata.startswith(STOPPED_METADATA) else ""
    return PipelinePartition(tp.topic, tp.partition, delta_version,
                             getattr(group_row, "committed", None), log_end, lag,
                             getattr(group_row, "owner", None), status)


def _table(rows) -> str:
    header = ("TOPIC", "PARTITION", "DELTA-VERSION", "KAFKA-COMMITTED", "LOG-END", "LAG", "OWNER", "STATUS")
    cells = [header] + [tuple("-" if v is None else str(v) for v in
                              (r.topic, r.partition, r.delta_version, r.committed, r.log_end, r.lag, r.owner,
                               r.status[:120]))
                        for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)

"""`scg offsets FILE show|reset`: where a pipeline's partitions stand, and moving them on purpose.

``show`` lists, per partition of the pipeline's topics, the output table's and the dead-letter
table's next offsets, the group's committed offset and its metadata, the log start and end and
the lag (log end minus the table's offset, else the group's). It writes nothing.

``reset --to earliest|latest|OFFSET|TIME [--partitions t:0,...] [--dry-run] [--force]`` moves the
partitions (all of them by default). Guarantees:

* Nothing is written before every partition's target is resolved and checked
  (:mod:`pipelines.runtime.offset_reset`): a refusal names the partition or argument, exit 2.
* A group with members is refused, naming them, unless ``--force``.
* Per existing table (output, then dead letters; a table that does not exist yet is left alone):
  :meth:`TxnDeltaTable.claim` bumps the partitions' owner epochs, so any member still writing them
  is refused from then on (``FENCED_WRITER``), then ONE commit
  (:meth:`TxnDeltaTable.record_partitions`) sets their next offsets (and, in the output table, the
  topic ID the target was resolved against); its commit info names the reset (``scg.event``
  ``OFFSETS_RESET``, who, from, to, the command). The output table first: it decides where a
  member starts.
* With ``--force`` the members are then removed from the group (LeaveGroup on their behalf, as
  Kafka's ``removeMembersFromConsumerGroup``): each hears UNKNOWN_MEMBER_ID, stops its query and
  rejoins, and starts from the tables' new offsets.
* Last, the offsets are committed to the group (OffsetCommit outside any generation, what Kafka's
  ``alterConsumerGroupOffsets`` sends; only an empty group takes it). A member that rejoined first
  refuses it: its first batch from the new offsets commits them instead.
* A failure after a table was written is ``RESET_INCOMPLETE`` naming what was written; the same
  command writes absolute offsets, so running it again completes the reset.
"""
from __future__ import annotations

import getpass
import json
import shlex
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from groupmgr.core import TopicPartition
from pipelines.runtime.offset_reset import (RESET_METADATA, TIMESTAMP, LogUnknown, PartitionState, ResetIncomplete,
                                            ResetPlan, build_plan, commit_info, members_text, parse_partitions,
                                            parse_target, refuse_members, select_partitions)

GROUP_TIMEOUT_S = 30.0
LEAVE_REASON = "scg offsets reset --force"


@dataclass(frozen=True)
class OffsetsView:
    """What the command read: the group (as :func:`groupmgr.describe.describe_group` gives it),
    both tables (None: it does not exist yet) and each selected partition's state."""

    group: object
    table: object | None
    dead_table: object | None
    states: tuple[PartitionState, ...]
    output_name: str = "output"                          # the output table's name in lines
    routed: tuple[tuple[str, object | None], ...] = ()  # (name, table) of a routing pipeline's further tables

    def output_tables(self, config) -> list[tuple[str, str, object | None]]:
        """(name, path, table or None) of every output table, in route order."""
        paths = [spec.path for spec in config.sink.output_tables(config.transform)]
        named = [(self.output_name, self.table), *self.routed]
        return [(name, path, table) for (name, table), path in zip(named, paths)]

    @property
    def members(self) -> list[tuple[str, str | None, str]]:
        return [(m.member_id, m.group_instance_id, m.host) for m in self.group.members]


def offsets_command(args) -> int:
    """``scg offsets FILE show|reset``; arguments are checked before the pipeline is read."""
    from pipelines.config import load_pipeline

    if args.action == "reset":
        target, wanted = parse_target(args.to), parse_partitions(args.partitions)
        config = load_pipeline(args.file)
        return _reset(config, args, target, wanted)
    config = load_pipeline(args.file)
    view = read_view(config, None)
    print(json.dumps(_json(config, view), indent=2) if args.json else _text(config, view))
    return 0


# -- reading ---------------------------------------------------------------------------------------
def read_view(config, wanted: Sequence[TopicPartition] | None, probe=None) -> OffsetsView:
    """Read the group, both tables and the brokers' logs for ``wanted`` (None: every partition of
    the pipeline's topics; named ones must exist, else UnknownResetPartition). Writes nothing."""
    from groupmgr.describe import describe_group
    from pipelines.runtime.broker_probe import BrokerProbe
    from pipelines.runtime.membership import member_config_for, resolve_topics
    from pipelines.runtime.start_offsets import lowest_recorded

    existing = _topic_partitions(config, resolve_topics(config))
    partitions = select_partitions(existing, wanted) if wanted is not None else tuple(existing)
    client = {k: v for k, v in config.kafka.confluent_config().items() if k != "bootstrap.servers"}
    group = describe_group(config.kafka.bootstrap_string, config.group.id, client,
                           client_kwargs=member_config_for(config).client_kwargs)
    own_probe = probe is None
    probe = probe or BrokerProbe(config.kafka.confluent_config())
    try:
        logs = probe.describe(partitions)
    finally:
        if own_probe:
            probe.close()
    storage = config.storage.delta_storage_options()
    table, *routed = (existing_table(spec.path, config.name, storage)
                      for spec in config.sink.output_tables(config.transform))
    dead = existing_table(config.sink.dead_letter_path, config.name, storage)
    ours = lowest_recorded([t.recorded_offsets(partitions) for t in (table, *routed) if t is not None])
    dead_letters = dead.recorded_offsets(partitions) if dead else {}
    committed = {(p.topic, p.partition): p for p in group.partitions}
    states = []
    for tp in partitions:
        log, row = logs.logs.get(tp), committed.get(tuple(tp))
        states.append(PartitionState(tp, ours.get(tp), dead_letters.get(tp), getattr(row, "committed", None),
                                     getattr(row, "metadata", "") or "", getattr(log, "earliest", None),
                                     getattr(log, "latest", None), getattr(log, "topic_id", None),
                                     logs.errors.get(tp)))
    names = [f"output {spec.name}" for spec in config.sink.tables] or ["output"]
    return OffsetsView(group, table, dead, tuple(states), names[0], tuple(zip(names[1:], routed)))


def existing_table(path: str, app_id: str, storage_options):
    """The TxnDeltaTable at ``path`` with the table's own schema and partition columns, or None
    when no table is there (never creates one)."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from sinks.txn_table import StorageUnavailable, TxnDeltaTable

    try:
        found = DeltaTable(path, storage_options=dict(storage_options) or None)
    except TableNotFoundError:
        return None
    except OSError as exc:
        raise StorageUnavailable(path, exc) from None
    return TxnDeltaTable(path, app_id, pa.schema(found.schema().to_arrow()),
                         found.metadata().partition_columns, storage_options)


def _topic_partitions(config, topics) -> list[TopicPartition]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({**config.kafka.confluent_config(), "log_level": 3}).list_topics(timeout=30)
    return sorted(TopicPartition(t, p) for t in topics if t in metadata.topics
                  for p in metadata.topics[t].partitions)


# -- reset -----------------------------------------------------------------------------------------
def _reset(config, args, target, wanted) -> int:
    from pipelines.runtime.broker_probe import BrokerProbe

    probe = BrokerProbe(config.kafka.confluent_config())
    try:
        view = read_view(config, wanted, probe)
        if not args.force:
            refuse_members(config.group.id, view.members)
        at_time = _offsets_at(probe, view, target.value) if target.kind == TIMESTAMP else {}
    finally:
        probe.close()
    plan = build_plan(view.states, target, at_time)
    print(f"pipeline {config.name}, group {config.group.id}")
    print("\n".join(plan.lines()))
    for name, path, table in (*view.output_tables(config),
                              ("dead-letter", config.sink.dead_letter_path, view.dead_table)):
        if table is None:
            print(f"the {name} table {path} does not exist yet: nothing to move there")
    if args.dry_run:
        print("dry run: nothing written")
        return 0
    if view.members:
        print(f"--force: fencing {members_text(view.members)}: their next batch is refused; they are "
              "removed from the group, rejoin and start from the new offsets")
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    written = write_reset(view, plan, who, _command_text(args))
    for line in written:
        print(line)
    print(_move_group(config, plan, view.members, who, written))
    return 0


def _offsets_at(probe, view: OffsetsView, timestamp_ms: int) -> dict[TopicPartition, int]:
    """ListOffsets by time for every partition of ``view``; LogUnknown names those unanswered."""
    found, errors = probe.offsets_at([s.tp for s in view.states], timestamp_ms)
    if errors:
        raise LogUnknown("; ".join(f"{tp.topic}:{tp.partition}: the brokers did not answer ListOffsets by time "
                                   f"({condition})" for tp, condition in sorted(errors.items())))
    return found


def write_reset(view: OffsetsView, plan: ResetPlan, who: str, command: str) -> list[str]:
    """Claim the plan's partitions in every existing table first (so no member writes them any
    more), then set their offsets in one commit per table, output first (the topic IDs there
    too); one line per table written. A failure before any table was written is raised as it
    is (at most owner epochs moved); after one, ResetIncomplete names what was written."""
    tables = [(name, t) for name, t in ((view.output_name, view.table), *view.routed,
                                        ("dead-letter", view.dead_table)) if t is not None]
    partitions = list(plan.offsets)
    ids = {s.tp: s.topic_id for s in view.states if s.tp in plan.offsets and s.topic_id is not None}
    epochs = {name: table.claim(partitions) for name, table in tables}
    written: list[str] = []
    for name, table in tables:
        try:
            before = table.recorded_offsets(partitions)  # after the claim: no member moves them any more
            table.record_partitions(epochs[name], plan.offsets, ids if name.startswith("output") else {},
                                    commit_info(plan, before, who, command))
        except Exception as exc:  # noqa: BLE001 - after a table was written, the reset is incomplete
            if not written:
                raise
            condition = getattr(exc, "condition", type(exc).__name__)
            raise ResetIncomplete(f"{'; '.join(written)}; the {name} table {table.path} was not: "
                                  f"[{condition}] {exc}; run the same command again") from exc
        written.append(f"{name} table {table.path}: offsets written (version {table.snapshot().version()})")
    return written


def _move_group(config, plan: ResetPlan, members, who: str, written: list[str]) -> str:
    """Remove ``members`` from the group (``--force``), then commit the plan's offsets to it; the
    line saying what the group got. Raises ResetIncomplete when a member could not be removed (it
    would wait, fenced, for a rebalance) or the commit failed with no member in the way."""
    from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport
    from groupmgr.generation import NO_GENERATION
    from groupmgr.group_errors import GroupError
    from groupmgr.offsets import OffsetAndMetadata, commit_offsets
    from groupmgr.rebalance import send_leave_group
    from pipelines.runtime.membership import member_config_for

    member = member_config_for(config)
    group = member.group_id
    transport = KafkaTransport(member.bootstrap_servers, "scg-offsets", member.client_kwargs)
    client = CoordinatorClient(transport, group, request_timeout_ms=int(GROUP_TIMEOUT_S * 1000))
    metadata = f"{RESET_METADATA}{who}"[:200]
    done = "; ".join(written) or "no table exists"
    try:
        try:
            transport.start(GROUP_TIMEOUT_S)
            for member_id, instance, _ in members:
                send_leave_group(client, group, member_id, instance, LEAVE_REASON, GROUP_TIMEOUT_S)
        except GroupError as exc:
            raise ResetIncomplete(f"{done}; the members could not be removed from group {group} "
                                  f"([{exc.condition}] {exc}): fenced, they wait for a rebalance; restart them "
                                  "and run the same command again") from exc
        try:
            commit_offsets(client, group, NO_GENERATION, None,
                           {tp: OffsetAndMetadata(to, metadata) for tp, to in plan.offsets.items()}, GROUP_TIMEOUT_S)
        except GroupError as exc:
            if members and written:
                return (f"group {group}: offsets not committed ([{exc.condition}]: the members rejoined first); "
                        "the tables decide where they start, and their first batches commit the new offsets")
            raise ResetIncomplete(f"{done}; the group {group}'s offsets were not committed: "
                                  f"[{exc.condition}] {exc}; run the same command again") from exc
    finally:
        client.close()
    return f"group {group}: offsets committed"


def _command_text(args) -> str:
    parts = ["scg", "offsets", args.file, "reset", "--to", args.to]
    parts += ["--partitions", args.partitions] if args.partitions else []
    parts += ["--force"] if args.force else []
    return shlex.join(parts)


# -- show ------------------------------------------------------------------------------------------
COLUMNS = ("TOPIC", "PARTITION", "TABLE", "DEAD-LETTERS", "GROUP", "LOG-START", "LOG-END", "LAG", "GROUP-METADATA")


def _text(config, view: OffsetsView) -> str:
    group = view.group
    lines = [f"pipeline {config.name}  group {config.group.id}  state {group.state}  members {len(group.members)}"]
    for name, path, table in (*view.output_tables(config),
                              ("dead-letter", config.sink.dead_letter_path, view.dead_table)):
        lines.append(f"{name} table {path}" + (f" (version {table.snapshot().version()})" if table
                                               else " (does not exist yet)"))
    rows = [COLUMNS] + [tuple(_cell(v) for v in (s.tp.topic, s.tp.partition, s.table, s.dead_letters, s.committed,
                                                  s.log_start, s.log_end, s.lag, (s.metadata or "")[:60]))
                        for s in view.states]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines.append("")
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines += [f"{s.tp.topic}:{s.tp.partition}: the brokers did not describe its log ({s.log_error})"
              for s in view.states if s.log_error]
    return "\n".join(lines)


def _json(config, view: OffsetsView) -> dict:
    def table(t, path):
        return {"path": path, "exists": t is not None, "version": t.snapshot().version() if t else None}

    return {"pipeline": config.name,
            "group": {"id": config.group.id, "state": view.group.state,
                      "members": [asdict(m) | {"partitions": [list(p) for p in m.partitions]}
                                  for m in view.group.members]},
            "tables": {"output": table(view.table, config.sink.path),
                       "dead_letters": table(view.dead_table, config.sink.dead_letter_path),
                       **{name: table(t, path) for name, path, t in view.output_tables(config)[1:]}},
            "partitions": [{"topic": s.tp.topic, "partition": s.tp.partition, "table": s.table,
                            "dead_letters": s.dead_letters, "group": s.committed, "group_metadata": s.metadata,
                            "log_start": s.log_start, "log_end": s.log_end, "lag": s.lag,
                            "log_error": s.log_error} for s in view.states]}


def _cell(value) -> str:
    return "-" if value is None or value == "" else str(value)

"""How a pipeline takes part in its consumer group: the group member built from the pipeline's
config, the topics it subscribes to, its offset commits, and the watch that notices when the
brokers run the group with their own assignor (KIP-848). ``scg describe`` uses the same rules."""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from groupmgr.coordinator_client import ACCEPTED_CLIENT_SETTINGS
from groupmgr.core import ScgError, TopicPartition
from groupmgr.member import GroupMember, MemberConfig
from groupmgr.server_assignment import CONSUMER_GROUP, GroupRunByBroker
from pipelines.runtime.pipeline_spec import PipelineSpec

log = logging.getLogger("scg.runner")


def group_member_factory(config: PipelineSpec, listener, **overrides) -> GroupMember:
    """The real consumer-group member for ``config`` (groupmgr), calling back ``listener`` (a
    RebalanceListener); ``overrides`` set other MemberConfig fields (e.g. metadata_max_age_ms)."""
    return GroupMember(member_config_for(config, **overrides), listener)


def member_config_for(config: PipelineSpec, **overrides) -> MemberConfig:
    """The MemberConfig of ``config``'s group; ``overrides`` replace any of its fields."""
    group = config.group
    client_kwargs = {k: v for k, v in config.kafka.kafka_python_kwargs(ACCEPTED_CLIENT_SETTINGS).items()
                     if k != "bootstrap_servers"}
    settings = dict(
        bootstrap_servers=config.kafka.bootstrap_string, group_id=group.id,
        topics=tuple(config.topics), topic_pattern=config.topic_pattern or None, assignors=tuple(group.assignors),
        group_instance_id=group.instance_id, session_timeout_ms=group.session_timeout_ms,
        rebalance_timeout_ms=group.rebalance_timeout_ms, heartbeat_interval_ms=group.heartbeat_interval_ms,
        metadata_max_age_ms=group.metadata_max_age_ms, client_kwargs=client_kwargs)
    return MemberConfig(**{**settings, **overrides})


def resolve_topics(config: PipelineSpec, timeout_s: float = 30.0) -> tuple[str, ...]:
    """The configured topics, or the existing topics matching ``topic_pattern`` now, by the same
    rule the running member applies (it re-matches every ``metadata_max_age``); for one-off views
    like describe."""
    if not config.topic_pattern:
        return tuple(config.topics)
    from groupmgr.coordinator_client import CoordinatorClient, KafkaTransport

    member = member_config_for(config)
    transport = KafkaTransport(member.bootstrap_servers, member.client_id, member.client_kwargs)
    client = CoordinatorClient(transport, member.group_id, request_timeout_ms=int(timeout_s * 1000))
    try:
        transport.start(timeout_s)
        return member.subscribed_topics(client.topic_names(client.deadline(timeout_s)))
    finally:
        client.close()


class OffsetCommitter:
    """Commits offsets to the group with the member's generation, after Delta committed them. A
    refused commit is reported, never raised: the Delta table holds the truth, and the next
    owner resumes from it."""

    def __init__(self, member, note: Callable[[str], None], refused: Callable[[], None] = lambda: None):
        """``note`` says why a commit was refused; ``refused`` counts it."""
        self._member, self._note, self._refused = member, note, refused

    def __call__(self, offsets: Mapping[TopicPartition, int], metadata: str) -> bool:
        """Commit ``offsets`` (next offsets to read) with ``metadata``; True when the group took them."""
        try:
            self._member.commit_offsets(offsets, metadata)
            return True
        except Exception as exc:  # noqa: BLE001 - Delta already holds the truth; report and go on
            self._refused()
            self._note(f"Kafka offset commit refused ({type(exc).__name__}: {exc}); "
                       "the Delta table is authoritative, the next owner resumes from it")
            return False


class ServerAssignmentWatch:
    """Notices when the brokers run the group with their own assignor (a member joined with
    ``group.protocol=consumer``): says so once, by name, and again when the group is classic
    again. With ``group.on_server_assignment: fail`` :meth:`check` returns the error that ends
    the member. Advisory otherwise: a describe that fails changes nothing."""

    def __init__(self, group, group_type: Callable[[], str], note: Callable[[str], None]):
        self._group, self._group_type, self._note = group, group_type, note
        self._run_by_broker = False
        self._due = False

    def assignment_arrived(self) -> None:
        """Any thread: the next :meth:`check_when_due` asks the brokers (once per assignment)."""
        self._due = True

    def check_when_due(self) -> ScgError | None:
        """Main thread, no lock held: :meth:`check` once after each assignment. The describe is a
        network round trip kept off the listener thread, where it would delay every query start."""
        due, self._due = self._due, False
        return self.check() if due else None

    def check(self) -> ScgError | None:
        """Ask who runs the group; the error that ends the member, if it must end."""
        try:
            kind = self._group_type()
        except Exception as exc:  # noqa: BLE001 - the check never stands in the way of a rebalance
            log.debug("describing the group failed: %s", exc)
            return None
        run_by_broker = kind == CONSUMER_GROUP
        if run_by_broker == self._run_by_broker:
            return None
        self._run_by_broker = run_by_broker
        if not run_by_broker:
            self._note(f"group {self._group.id} is a classic group again: assignor "
                       f"{', '.join(self._group.assignors)} decides")
            return None
        error = GroupRunByBroker(self._group.id, tuple(self._group.assignors))
        self._note(error.headline())
        return error if self._group.on_server_assignment == "fail" else None

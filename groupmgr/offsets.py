"""Committing and fetching group offsets (OffsetCommit / OffsetFetch) for one generation.

Offset convention (Kafka's, used everywhere in this project): a committed offset is **the next
offset to read**, i.e. the offset of the last processed record + 1. A partition with no committed
offset is absent from :func:`fetch_offsets`' result (the broker says -1).

A commit carries the member's generation id, member id and group instance id. The broker rejects
it when that generation is no longer current (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID) or while the group awaits the leader's assignment (REBALANCE_IN_PROGRESS);
:func:`commit_offsets` then raises :class:`StaleGenerationError` and never retries as another
generation. Coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, lost connection,
COORDINATOR_LOAD_IN_PROGRESS) are retried with bounded backoff after re-discovering the
coordinator; retrying is safe because a commit of the same offsets is idempotent.

Stateless functions; thread-safe when the client is.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest

from groupmgr.core import TopicPartition
from groupmgr.coordinator_client import CoordinatorClient
from groupmgr.group_errors import (RebalanceInProgress, StaleGenerationError, error_for_code,
                             raise_for_error_code)
from groupmgr.generation import Generation

MAX_COMMIT_VERSION = 9  # v10 identifies topics by id only (KIP-848); names are what we have
MAX_FETCH_VERSION = 9
_CommitTopic = OffsetCommitRequest.OffsetCommitRequestTopic
_CommitPartition = _CommitTopic.OffsetCommitRequestPartition
_FetchTopic = OffsetFetchRequest.OffsetFetchRequestTopic
_FetchGroup = OffsetFetchRequest.OffsetFetchRequestGroup
_FetchGroupTopic = _FetchGroup.OffsetFetchRequestTopics


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed position: ``offset`` is the next offset to read; ``metadata`` is free text."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1

    def __post_init__(self) -> None:
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise ValueError(f"offset must be an int >= 0 (the next offset to read), got {self.offset!r}")
        if not isinstance(self.metadata, str):
            raise TypeError(f"metadata must be str, got {self.metadata!r}")


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(partitions):
        grouped[topic].append(partition)
    return grouped


def _commit_request(group_id: str, generation: Generation, instance_id: str | None,
                    offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> OffsetCommitRequest:
    topics = [_CommitTopic(name=topic, partitions=[
        _CommitPartition(partition_index=p, committed_offset=offsets[TopicPartition(topic, p)].offset,
                         committed_leader_epoch=offsets[TopicPartition(topic, p)].leader_epoch,
                         committed_metadata=offsets[TopicPartition(topic, p)].metadata)
        for p in partitions]) for topic, partitions in _by_topic(offsets).items()]
    return OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=generation.generation_id,
                               member_id=generation.member_id, group_instance_id=instance_id,
                               retention_time_ms=-1, topics=topics, max_version=MAX_COMMIT_VERSION)


def _check_commit_response(response, group_id: str, generation: Generation) -> None:
    """Raise the first partition error; stale-generation errors become StaleGenerationError."""
    context = f"OffsetCommit group {group_id} generation {generation.generation_id}"
    for topic in response.topics:
        for partition in topic.partitions:
            error = error_for_code(partition.error_code, f"{context} {topic.name}-{partition.partition_index}")
            if error is None:
                continue
            if error.fenced or isinstance(error, RebalanceInProgress):
                raise StaleGenerationError(str(error), cause=error,
                                           generation_id=generation.generation_id) from error
            raise error


def commit_offsets(client: CoordinatorClient, group_id: str, generation: Generation,
                   instance_id: str | None, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                   timeout_s: float = 30.0) -> None:
    """Commit ``offsets`` (next offsets to read) as ``generation``; returns once all are stored.

    Raises StaleGenerationError when the generation is not current, other GroupErrors for
    non-retriable failures (e.g. OffsetMetadataTooLarge, GroupAuthorizationFailed), and the last
    retriable error when ``timeout_s`` runs out.
    """
    if not offsets:
        return
    for tp, value in offsets.items():
        if not isinstance(tp, tuple) or not isinstance(value, OffsetAndMetadata):
            raise TypeError(f"offsets must map TopicPartition -> OffsetAndMetadata, got {tp!r}: {value!r}")
    normalized = {TopicPartition(*tp): value for tp, value in offsets.items()}
    client.call(lambda: _commit_request(group_id, generation, instance_id, normalized),
                lambda response: _check_commit_response(response, group_id, generation),
                deadline=client.deadline(timeout_s))


def _fetch_request(group_id: str, partitions: list[TopicPartition] | None,
                   require_stable: bool = True) -> OffsetFetchRequest:
    """``partitions`` None asks for every partition the group has an offset for (null topics,
    OffsetFetch v2+)."""
    if partitions is None:
        return OffsetFetchRequest(group_id=group_id, topics=None, groups=[_FetchGroup(group_id=group_id, topics=None)],
                                  require_stable=require_stable, min_version=2, max_version=MAX_FETCH_VERSION)
    grouped = _by_topic(partitions)
    topics = [_FetchTopic(name=t, partition_indexes=ps) for t, ps in grouped.items()]
    group_topics = [_FetchGroupTopic(name=t, partition_indexes=ps) for t, ps in grouped.items()]
    return OffsetFetchRequest(group_id=group_id, topics=topics,
                              groups=[_FetchGroup(group_id=group_id, topics=group_topics)],
                              require_stable=require_stable, max_version=MAX_FETCH_VERSION)


def _parse_fetch_response(response, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
    if response.API_VERSION >= 8:
        group = response.groups[0]
        top_error, topics = group.error_code, group.topics
    else:
        top_error, topics = response.error_code, response.topics
    raise_for_error_code(top_error, f"OffsetFetch group {group_id}")
    result: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in topics:
        for p in topic.partitions:
            raise_for_error_code(p.error_code, f"OffsetFetch group {group_id} {topic.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                result[TopicPartition(topic.name, p.partition_index)] = OffsetAndMetadata(
                    p.committed_offset, p.metadata or "", p.committed_leader_epoch)
    return result


def fetch_offsets(client: CoordinatorClient, group_id: str, partitions: Iterable[TopicPartition],
                  timeout_s: float = 30.0) -> dict[TopicPartition, OffsetAndMetadata]:
    """Committed offsets (next offsets to read) of ``partitions``; partitions without one are absent.

    Uses ``require_stable``: while a transactional commit is pending the broker answers
    UNSTABLE_OFFSET_COMMIT, which is retried until ``timeout_s``.
    """
    wanted = sorted({TopicPartition(*tp) for tp in partitions})
    if not wanted:
        return {}
    return client.call(lambda: _fetch_request(group_id, wanted),
                       lambda response: _parse_fetch_response(response, group_id),
                       deadline=client.deadline(timeout_s))


def fetch_all_offsets(client: CoordinatorClient, group_id: str,
                      timeout_s: float = 30.0) -> dict[TopicPartition, OffsetAndMetadata]:
    """Every committed offset of ``group_id`` (OffsetFetch with null topics), metadata exact as
    committed, for views: without ``require_stable`` (a pending transactional commit is not
    waited for; the last stable offset is given). Partitions without one are absent. Each
    attempt waits at most ``timeout_s`` too (and the client's request timeout)."""
    return client.call(lambda: _fetch_request(group_id, None, require_stable=False),
                       lambda response: _parse_fetch_response(response, group_id),
                       deadline=client.deadline(timeout_s), timeout_s=min(client.request_timeout_s, timeout_s))


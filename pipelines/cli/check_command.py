"""``scg check FILE``: a pipeline's ``security:`` and storage tried without Spark, one line each.

It connects as the pipeline's principal, as ``scg run``'s start-up check does
(:mod:`pipelines.runtime.kafka_access`), and writes where the tables live
(:mod:`pipelines.runtime.storage_probe`). Each check prints ``ok``, ``FAILED`` (with its named
condition) or ``skipped`` (an earlier check it needs failed, the pipeline does not use it, or the
check was inconclusive: a transient fault, or an answer that says nothing; the reason is given).
Exit 0 when no check failed, 1 otherwise. Lines name the user, files and resources, never a
password or key.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from groupmgr.core import ScgError

CHECK_TIMEOUT_S = 10.0
OK, FAILED, SKIPPED = "ok", "FAILED", "skipped"


@dataclass(frozen=True)
class CheckLine:
    """One check's outcome: ``ok``, ``FAILED`` or ``skipped``, what was checked, and how it went."""

    outcome: str
    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.outcome:<8}{self.check}: {self.detail}"


def check_command(args, out: Callable[[str], None] = print) -> int:
    from pipelines.config import load_pipeline

    config = load_pipeline(args.file)
    failed = False
    for line in run_checks(config):
        out(str(line))
        failed = failed or line.outcome == FAILED
    return 1 if failed else 0


def run_checks(config, timeout_s: float = CHECK_TIMEOUT_S) -> Iterator[CheckLine]:
    """The Kafka checks, then the storage checks (which do not depend on Kafka)."""
    yield from kafka_checks(config, timeout_s)
    yield from storage_checks(config)


def kafka_checks(config, timeout_s: float) -> Iterator[CheckLine]:
    from pipelines.runtime.kafka_access import (KafkaAccess, KafkaAuthenticationFailed, KafkaProtocolMismatch,
                                                KafkaSaslMechanismRefused, KafkaTlsFailed)

    kafka, sec = config.kafka, config.kafka.security
    tls = sec.protocol in ("SSL", "SASL_SSL")
    stages = [("brokers reachable", None), ("security protocol", KafkaProtocolMismatch),
              ("TLS handshake", KafkaTlsFailed),
              ("SASL authentication", (KafkaSaslMechanismRefused, KafkaAuthenticationFailed))]
    passed = {"brokers reachable": f"a broker at {kafka.bootstrap_string} answered",
              "security protocol": f"the listener speaks {sec.protocol}",
              "TLS handshake": (f"the broker's certificate is trusted ({sec.ssl_ca_location or 'the system CAs'})"
                                + (f", client certificate {sec.ssl_certificate_location} accepted"
                                   if sec.ssl_certificate_location else "")) if tls else None,
              "SASL authentication": f"{sec.sasl_mechanism} as {sec.sasl_username!r}" if sec.uses_sasl else None}
    access = KafkaAccess(kafka, config.group.id, timeout_s)
    try:
        refusal = None
        try:
            reached = access.connect()
        except ScgError as exc:
            reached, refusal = None, exc
        if reached is False:
            yield CheckLine(FAILED, "brokers reachable",
                            f"no broker at {kafka.bootstrap_string} could be reached within {timeout_s:g} s")
        failed_at = next((name for name, kind in stages if kind and isinstance(refusal, kind)), None)
        if refusal is not None and failed_at is None:
            raise refusal
        if reached is False:
            for name, _ in stages[1:]:
                yield CheckLine(SKIPPED, name, "no broker reached")
        else:
            for name, _ in stages:
                if name == failed_at:
                    yield CheckLine(FAILED, name, refusal.headline())
                    failed_at = "after"
                elif failed_at == "after":
                    yield CheckLine(SKIPPED, name, "an earlier check failed")
                elif passed[name] is None:
                    yield CheckLine(SKIPPED, name, f"protocol {sec.protocol} does not use it")
                else:
                    yield CheckLine(OK, name, passed[name])
        connected = reached is True
        yield from _principal_checks(access, config, connected)
    finally:
        access.close()


def _principal_checks(access, config, connected: bool) -> Iterator[CheckLine]:
    from pipelines.runtime.kafka_access import Inconclusive

    what = f"/{config.topic_pattern}/" if config.topic_pattern else ", ".join(config.topics)
    steps = [
        (f"topics {what}", lambda: _topics(access, config)),
        (f"group {config.group.id}", lambda: (access.check_group(), "READ (members join and commit in it)")[1]),
        ("session timeout", lambda: _session_timeout(access, config)),
    ]
    group_failed = False
    for name, step in steps:
        if not connected:
            yield CheckLine(SKIPPED, name, "not connected")
        elif group_failed and name == "session timeout":
            yield CheckLine(SKIPPED, name, "the coordinator is asked as a member of the group")
        else:
            try:
                yield CheckLine(OK, name, step())
            except Inconclusive as exc:
                yield CheckLine(SKIPPED, name, f"inconclusive: {exc.reason}")
            except ScgError as exc:
                group_failed = name.startswith("group ")
                yield CheckLine(FAILED, name, exc.headline())


def _topics(access, config) -> str:
    topics = access.topics_to_check(config.topics, config.topic_pattern)
    checked = access.check_topics(topics)
    absent = [t for t in topics if t not in checked]
    return (f"DESCRIBE and READ on {', '.join(checked) or 'none'}"
            + (f"; not there (the member waits for them): {', '.join(absent)}" if absent else ""))


def _session_timeout(access, config) -> str:
    """The coordinator's answer; an unknown one is :class:`Inconclusive` (``skipped``)."""
    from groupmgr.join_probe import Answer
    from pipelines.runtime.kafka_access import Inconclusive

    answer = access.check_session_timeout(config.group.session_timeout_ms, config.group.rebalance_timeout_ms)
    if answer.answer is not Answer.ACCEPTED:
        raise Inconclusive(answer.detail)
    if access.group_existed is False:
        return (f"{answer.detail}; group {config.group.id} did not exist: asking created it as an empty group, "
                "listed until the coordinator's periodic cleanup")
    return answer.detail


def storage_checks(config) -> Iterator[CheckLine]:
    from pipelines.runtime.storage_probe import check_writable

    options = config.storage.delta_storage_options()
    tables = [(f"table {t.name}" if config.sink.tables else "table", t.path)
              for t in config.sink.output_tables(config.transform)]
    for name, path in (*tables, ("dead-letter table", config.sink.dead_letter_path)):
        try:
            yield CheckLine(OK, f"{name} {path}", f"writable: {check_writable(path, options)}")
        except ScgError as exc:
            yield CheckLine(FAILED, f"{name} {path}", exc.headline())

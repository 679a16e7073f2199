"""The runner's classification of failures (transient / permanent / unknown) and its restart
policy (pipelines/runtime/failure_rules.py)."""
import pytest
from confluent_kafka import KafkaError, KafkaException
from deltalake.exceptions import CommitFailedError, DeltaProtocolError, SchemaMismatchError

from groupmgr.core import OffsetRange, TopicPartition
from groupmgr.group_errors import CoordinatorUnreachable, FencedInstanceId
from groupmgr.kafka_faults import Backoff, FaultKind
from pipelines.runtime.failure_rules import RestartPolicy, classify_failure, classify_text
from pipelines.runtime.start_offsets import NoStartingOffsetError
from sinks.txn_table import FencedWriterError, OffsetGapError, SinkError, StorageUnavailable
from tests.support.fake_clock import FakeClock

TRANSIENT, PERMANENT, UNKNOWN = FaultKind.TRANSIENT, FaultKind.PERMANENT, FaultKind.UNKNOWN
TP = TopicPartition("t", 0)

STREAM_FAILED = ("[STREAM_FAILED] Query [id = 6a1, runId = 9b2] terminated with exception: Job aborted due to "
                 "stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0: {cause}\n"
                 "\tat org.apache.spark.sql.kafka010.KafkaDataConsumer.fetch(KafkaDataConsumer.scala:301)\n")
FOREACH_BATCH = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
                 "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach "
                 "batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most "
                 "recent call last):\n  File \"/work/pipelines/runtime/batch_writer.py\", line 140, in __call__\n"
                 "    self._write(batch_id, df)\n{cause}\n")


def kafka_java(name: str, message: str = "boom") -> str:
    return STREAM_FAILED.format(cause=f"org.apache.kafka.common.errors.{name}: {message}")


@pytest.mark.parametrize("error, kind, condition", [
    (KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH)), TRANSIENT, "FENCED_LEADER_EPOCH"),
    (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), PERMANENT, "TOPIC_AUTHORIZATION_FAILED"),
    (CoordinatorUnreachable("x"), TRANSIENT, "COORDINATOR_UNREACHABLE"),
    (FencedInstanceId("x"), PERMANENT, "FENCED_INSTANCE_ID"),
    (StorageUnavailable("s3://b/t", OSError("error sending request: connection refused")), TRANSIENT,
     "STORAGE_UNAVAILABLE"),
    (StorageUnavailable("s3://b/t", OSError("<Code>InvalidAccessKeyId</Code>")), PERMANENT, "STORAGE_UNAVAILABLE"),
    (StorageUnavailable("s3://b/t", OSError("<Code>NoSuchBucket</Code>")), PERMANENT, "STORAGE_UNAVAILABLE"),
    (FencedWriterError("t", TP, 1, 2), TRANSIENT, "FENCED_WRITER"),
    (SinkError("t: commit kept conflicting after 5 attempts"), TRANSIENT, "SINK_ERROR"),
    (OffsetGapError("t", OffsetRange("t", 0, 10, 20), 5), PERMANENT, "OFFSET_GAP"),
    (NoStartingOffsetError([TP]), PERMANENT, "NO_STARTING_OFFSET"),
    (CommitFailedError("conflict"), TRANSIENT, "COMMIT_CONFLICT"),
    (DeltaProtocolError("reader version"), PERMANENT, "DELTA_PROTOCOL"),
    (SchemaMismatchError("schema"), PERMANENT, "DELTA_SCHEMA_MISMATCH"),
    (OSError("Generic S3 error: error sending request for url: connection reset"), TRANSIENT, "STORAGE_UNAVAILABLE"),
    (OSError("Generic S3 error: <Code>AccessDenied</Code>"), PERMANENT, "STORAGE_UNAVAILABLE"),
    (PermissionError("[Errno 13] Permission denied: '/t'"), PERMANENT, "STORAGE_UNAVAILABLE"),
    (ConnectionResetError("reset"), TRANSIENT, "CONNECTION_FAILED"),
    (RuntimeError("injected failure"), UNKNOWN, "UNCLASSIFIED_FAILURE"),
])
def test_python_exceptions(error, kind, condition):
    fault = classify_failure(error)
    assert (fault.kind, fault.condition) == (kind, condition)


def test_any_other_project_error_is_permanent_with_its_condition():
    from pipelines.runtime.member_errors import QueryFailedRepeatedly

    assert classify_failure(QueryFailedRepeatedly("x")).kind is PERMANENT


@pytest.mark.parametrize("java, condition", [
    ("NotLeaderOrFollowerException", "NOT_LEADER_OR_FOLLOWER"),
    ("FencedLeaderEpochException", "FENCED_LEADER_EPOCH"),
    ("LeaderNotAvailableException", "LEADER_NOT_AVAILABLE"),
    ("TimeoutException", "TIMEOUT"),
    ("DisconnectException", "DISCONNECT"),
    ("NotCoordinatorException", "NOT_COORDINATOR"),
    ("CoordinatorNotAvailableException", "COORDINATOR_NOT_AVAILABLE"),
    ("NetworkException", "NETWORK"),
    ("KafkaStorageException", "KAFKA_STORAGE"),
])
def test_spark_query_failures_from_retriable_kafka_exceptions_are_transient(java, condition):
    fault = classify_failure(Exception(kafka_java(java)))
    assert (fault.kind, fault.condition) == (TRANSIENT, condition)
    assert fault.detail.startswith("Exception: [STREAM_FAILED]") and "\n" not in fault.detail


@pytest.mark.parametrize("java, condition", [
    ("TopicAuthorizationException", "TOPIC_AUTHORIZATION"),
    ("GroupAuthorizationException", "GROUP_AUTHORIZATION"),
    ("SaslAuthenticationException", "SASL_AUTHENTICATION"),
    ("SslAuthenticationException", "SSL_AUTHENTICATION"),
    ("InvalidTopicException", "INVALID_TOPIC"),
    ("OffsetOutOfRangeException", "OFFSET_OUT_OF_RANGE"),
])
def test_spark_query_failures_a_person_must_fix_are_permanent(java, condition):
    fault = classify_failure(Exception(kafka_java(java)))
    assert (fault.kind, fault.condition) == (PERMANENT, condition)


def test_a_permanent_cause_anywhere_in_the_chain_wins_over_a_transient_wrapper():
    text = kafka_java("TimeoutException") + "Caused by: org.apache.kafka.common.errors.TopicAuthorizationException: no"
    assert classify_text(text).kind is PERMANENT


@pytest.mark.parametrize("text", [
    "[KAFKA_DATA_LOSS.START_OFFSET_RESET] Some data may have been lost because they are not available in Kafka",
    STREAM_FAILED.format(cause="java.lang.IllegalStateException: Cannot fetch offset 5 (GroupId: x, TopicPartition: "
                               "t-0). Some data may have been lost because they are not available in Kafka any more"),
])
def test_spark_data_loss_restarts_for_the_partition_checks(text):
    """Spark stops the query at a gap; the restart's partition checks apply on_data_loss to the
    partition alone, so the query failure itself is transient."""
    fault = classify_text(text)
    assert (fault.kind, fault.condition) == (TRANSIENT, "KAFKA_DATA_LOSS")


@pytest.mark.parametrize("line, condition", [
    ("pipelines.runtime.kafka_range_reader.KafkaDataLoss: [KAFKA_DATA_LOSS] t-0: offsets from 5 were planned "
     "(range [5, 9)) but the log now starts at 7. Some data may have been lost", "KAFKA_DATA_LOSS"),
    ("pipelines.runtime.kafka_range_reader.KafkaReadStalled: [KAFKA_READ_STALLED] t-0: no progress at offset 5 "
     "for 120s while reading [5, 9) (TimeoutException)", "KAFKA_READ_STALLED"),
    ("pipelines.runtime.kafka_range_reader.LogEndsUnavailable: [LEADER_NOT_AVAILABLE] the log end of t-0 was not "
     "available for 30s", "LOG_END_UNAVAILABLE"),
    ("pipelines.runtime.registry_client.RegistryUnavailableError: schema registry http://r:8081 did not answer: "
     "ConnectError: [Errno 111] Connection refused", "SCHEMA_REGISTRY_UNAVAILABLE"),
])
def test_the_scg_kafka_reader_s_failures_restart_the_query(line, condition):
    """As a Python worker's traceback inside the query's failure (executor or planner)."""
    text = STREAM_FAILED.format(cause="org.apache.spark.api.python.PythonException: Traceback (most recent call "
                                      "last):\n  File \"x.py\", line 1, in read\n" + line)
    fault = classify_text(text)
    assert (fault.kind, fault.condition) == (TRANSIENT, condition)


def test_source_changed_is_transient():
    from pipelines.runtime.partition_checks import SourceChanged

    error = SourceChanged("TOPIC_RECREATED", "topic t no longer has the ID the query started with")
    assert (classify_failure(error).kind, classify_failure(error).condition) == (TRANSIENT, "TOPIC_RECREATED")


@pytest.mark.parametrize("cause, kind, condition", [
    ("sinks.txn_table.StorageUnavailable: /t: the table's storage failed: error sending request (check "
     "storage.endpoint, the credentials and the bucket)", TRANSIENT, "STORAGE_UNAVAILABLE"),
    ("sinks.txn_table.StorageUnavailable: /t: the table's storage failed: AccessDenied (check storage.endpoint, "
     "the credentials and the bucket)", PERMANENT, "STORAGE_UNAVAILABLE"),
    ("OSError: Generic LocalFileSystem error: Unable to open file /t/x.parquet: No space left", TRANSIENT,
     "IO_ERROR"),
    ("cimpl.KafkaException: KafkaError{code=NOT_LEADER_FOR_PARTITION,val=6,str=\"Broker: Not leader\"}",
     TRANSIENT, "NOT_LEADER_OR_FOLLOWER"),
    ("cimpl.KafkaException: KafkaError{code=_TRANSPORT,val=-195,str=\"Connection refused\"}", TRANSIENT,
     "TRANSPORT"),
    ("cimpl.KafkaException: KafkaError{code=TOPIC_AUTHORIZATION_FAILED,val=29,str=\"denied\"}", PERMANENT,
     "TOPIC_AUTHORIZATION_FAILED"),
    ("RuntimeError: injected transient failure", UNKNOWN, "UNCLASSIFIED_FAILURE"),
])
def test_failed_batches_are_judged_by_the_python_traceback_in_the_query_error(cause, kind, condition):
    fault = classify_text(FOREACH_BATCH.format(cause=cause))
    assert (fault.kind, fault.condition) == (kind, condition)


@pytest.mark.parametrize("cause", [
    "java.net.ConnectException: Connection refused",
    "java.util.concurrent.TimeoutException: Futures timed out after [30 seconds]",
    "java.io.IOException: Failed to rename checkpoint file",
    "org.apache.hadoop.fs.s3a.AWSClientIOException: getFileStatus on s3a://b/c: Unable to execute HTTP request",
])
def test_jvm_network_and_io_failures_are_transient(cause):
    assert classify_text(STREAM_FAILED.format(cause=cause)).kind is TRANSIENT


# -- RestartPolicy ------------------------------------------------------------------------------
def policy(clock, max_unknown=3):
    return RestartPolicy(Backoff(1.0, 30.0, jitter=0.0), max_unknown, clock)


TRANSPORT = KafkaException(KafkaError(KafkaError._TRANSPORT))


def test_transient_failures_are_retried_forever_with_capped_backoff():
    clock = FakeClock()
    restarts = policy(clock)
    delays = []
    for _ in range(200):
        verdict = restarts.failed(TRANSPORT)
        assert not verdict.give_up
        delays.append(verdict.delay_s)
        clock.advance(verdict.delay_s)
    assert delays[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0] and max(delays) == 30.0
    assert verdict.attempt == 200 and verdict.persisted_s == pytest.approx(sum(delays[:-1]))


def test_a_success_resets_the_backoff():
    restarts = policy(FakeClock())
    restarts.failed(TRANSPORT)
    restarts.failed(TRANSPORT)
    restarts.succeeded()
    assert restarts.failed(TRANSPORT).delay_s == 1.0


def test_a_permanent_failure_gives_up_at_once():
    verdict = policy(FakeClock()).failed(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert verdict.give_up and verdict.fault.condition == "TOPIC_AUTHORIZATION_FAILED"


def test_unknown_failures_get_a_bounded_number_of_restarts_in_a_row():
    restarts = policy(FakeClock(), max_unknown=3)
    verdicts = [restarts.failed(RuntimeError("bug")) for _ in range(3)]
    assert [v.unknown_count for v in verdicts] == [1, 2, 3] and not any(v.give_up for v in verdicts)
    assert restarts.failed(RuntimeError("bug")).give_up


def test_a_transient_failure_between_unknown_ones_resets_their_count():
    restarts = policy(FakeClock(), max_unknown=2)
    restarts.failed(RuntimeError("bug"))
    restarts.failed(RuntimeError("bug"))
    restarts.failed(TRANSPORT)
    assert not restarts.failed(RuntimeError("bug")).give_up


def test_an_unknown_topic_is_given_up_once_it_persisted_past_its_limit():
    clock = FakeClock()
    restarts = policy(clock)
    unknown_topic = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    first = restarts.failed(unknown_topic)
    assert not first.give_up
    clock.advance(first.fault.give_up_after_s)
    assert restarts.failed(unknown_topic).give_up


# -- the cause chain of a Spark failure -----------------------------------------------------------
class Captured(Exception):
    """Shaped like pyspark's CapturedException: top message in _desc, JVM trace, converted cause."""

    def __init__(self, desc, trace="", cause=None):
        super().__init__(desc)
        self._desc, self._stackTrace, self._cause = desc, trace, cause


def test_failure_text_spells_out_the_jvm_cause_chain_that_str_hides():
    from pipelines.runtime.streaming_query import failure_text

    cause = Captured("org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired",
                     "org.apache.kafka.common.errors.TimeoutException: Timeout\n\tat org.apache.kafka.X.y(X.java:1)")
    top = Captured("[STREAM_FAILED] Query [id = 1] terminated with exception: Timeout of 60000ms expired",
                   "\tat org.apache.spark.sql.execution.streaming.StreamExecution.run", cause)
    text = failure_text(top)
    assert text.startswith("Captured: [STREAM_FAILED]") and "common.errors.TimeoutException" in text
    fault = classify_failure(top, text)
    assert (fault.kind, fault.condition) == (TRANSIENT, "TIMEOUT")
    assert "TimeoutException: Timeout of 60000ms expired" in fault.detail  # the deciding line, not the top one
    assert classify_failure(top).kind is UNKNOWN  # the top message alone names no cause


def test_failure_text_follows_python_causes_but_not_suppressed_context():
    from pipelines.runtime.streaming_query import failure_text

    try:
        try:
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
        except KafkaException as inner:
            raise RuntimeError("start failed") from inner
    except RuntimeError as outer:
        assert "TOPIC_AUTHORIZATION_FAILED" in failure_text(outer)
    try:
        try:
            raise ValueError("hidden")
        except ValueError:
            raise RuntimeError("shown") from None
    except RuntimeError as outer:
        assert "hidden" not in failure_text(outer)


def test_source_lines_and_line_numbers_in_tracebacks_are_not_causes():
    text = FOREACH_BATCH.format(cause="  File \"/work/sinks/txn_table.py\", line 403, in commit\n"
                                      "    raise OffsetGapError(self.path, rng, recorded)\n"
                                      "OSError: Generic LocalFileSystem error: connection reset")
    fault = classify_text(text)
    assert (fault.kind, fault.condition) == (TRANSIENT, "IO_ERROR")


def test_a_runtime_failure_names_a_file_with_its_whole_cause_chain(tmp_path):
    from pipelines.runtime.failure_rules import Verdict
    from pipelines.runtime.member_errors import PermanentFault, fatal_error
    from pipelines.runtime.streaming_query import failure_text

    try:
        try:
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
        except KafkaException as inner:
            raise RuntimeError("query start failed") from inner
    except RuntimeError as outer:
        verdict = Verdict(classify_failure(outer, failure_text(outer)), 1, None)
        error = fatal_error(outer, verdict, "query start failed", str(tmp_path))
    assert isinstance(error, PermanentFault) and error.details.startswith(str(tmp_path))
    text = open(error.details).read()
    assert "RuntimeError: query start failed" in text and "TOPIC_AUTHORIZATION_FAILED" in text


def test_a_registry_that_does_not_answer_in_the_driver_is_transient():
    from pipelines.runtime.registry_client import RegistryUnavailableError

    fault = classify_failure(RegistryUnavailableError("http://r:8081", "HTTP 503: busy"))
    assert (fault.kind, fault.condition) == (TRANSIENT, "SCHEMA_REGISTRY_UNAVAILABLE")


def test_refused_registry_credentials_in_an_executor_are_permanent():
    text = STREAM_FAILED.format(cause="org.apache.spark.api.python.PythonException: Traceback (most recent call "
                                      "last):\n  File \"x.py\", line 1, in read\n"
                                      "pipelines.runtime.registry_client.RegistryRefusedError: schema registry "
                                      "http://r:8081 refused the credentials: HTTP 401: Unauthorized")
    fault = classify_text(text)
    assert (fault.kind, fault.condition) == (PERMANENT, "SCHEMA_REGISTRY_REFUSED")

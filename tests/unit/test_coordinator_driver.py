"""A member whose batches take the Arrow path starts its driver JVM with C1 only (no record
passes through that JVM); any other member's driver keeps the JVM's default compilers."""
import pytest

from pipelines.cli import run_member
from pipelines.config.load import load_pipeline
from pipelines.runtime import kafka_access, spark_session
from pipelines.runtime.spark_session import COORDINATOR_JAVA_OPTIONS, local_submit_args
from tests.support.kafka_data import write_pipeline


def test_the_submit_arguments_carry_c1_only_when_no_row_enters_the_jvm():
    assert COORDINATOR_JAVA_OPTIONS == "-XX:TieredStopAtLevel=1"
    assert COORDINATOR_JAVA_OPTIONS in local_submit_args(rows_in_jvm=False)
    assert "TieredStopAtLevel" not in local_submit_args(rows_in_jvm=True)
    assert local_submit_args(rows_in_jvm=False).endswith("pyspark-shell")


class _SessionAsked(Exception):
    pass


JSON_BLOCKS = 'format: {type: json, schema: "id BIGINT, name STRING"}\n'


@pytest.mark.parametrize("reader, extra, rows_in_jvm", [
    (None, JSON_BLOCKS, False),                                          # the Arrow path
    (None, "format: {type: raw}\n", False),                              # the Arrow path, raw values
    (None, JSON_BLOCKS + "transform: SELECT * FROM input\n", True),      # the Spark SQL path
    (None, 'format: {type: json, schema: "id BIGINT, at TIMESTAMP"}\n', True),  # JSON Arrow cannot decode
    ("spark-kafka", JSON_BLOCKS, True),                                  # Spark's Kafka source
])
def test_run_asks_for_the_driver_its_batches_need(tmp_path, monkeypatch, reader, extra, rows_in_jvm):
    path = write_pipeline(tmp_path / "p.yaml", "127.0.0.1:9", "t", "g", tmp_path, reader=reader, extra=extra)
    asked = {}

    def session(app_name, settings=None, rows_in_jvm=True):
        asked["rows_in_jvm"] = rows_in_jvm
        raise _SessionAsked

    monkeypatch.setattr(kafka_access, "check_kafka_access", lambda *args, **kwargs: None)
    monkeypatch.setattr(spark_session, "get_or_create_spark", session)
    with pytest.raises(_SessionAsked):
        run_member.run_pipeline(load_pipeline(path), out=lambda line: None)
    assert asked == {"rows_in_jvm": rows_in_jvm}


def test_the_pipeline_s_driver_java_options_come_last_and_survive_quoting():
    import shlex

    settings = {"spark.master": "local[1]", "spark.driver.extraJavaOptions": '-Dscg.probe="a b" -XX:TieredStopAtLevel=4'}
    args = shlex.split(local_submit_args(rows_in_jvm=False, settings=settings))
    assert args[0] == "--driver-java-options" and args[-1] == "pyspark-shell"
    options = args[1]
    assert options.endswith('-Dscg.probe="a b" -XX:TieredStopAtLevel=4')  # the user's flags win over C1
    assert options.index(COORDINATOR_JAVA_OPTIONS) < options.index("-Dscg.probe")
    assert "log4j2.configurationFile" in options

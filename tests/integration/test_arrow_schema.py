"""A table's Arrow schema comes from its Spark schema without running a job
(pipeline_tables.arrow_schema): it must be the schema Spark's ``toArrow`` gives the same
DataFrame, for every type a pipeline's rows can hold, with and without large variable types."""
from __future__ import annotations

import pytest

from pipelines.runtime.pipeline_tables import LARGE_VAR_TYPES_SETTING, arrow_schema
from pipelines.runtime.records import RecordFormat, classify, dead_letters, good_rows, kafka_row_ddl

pytestmark = pytest.mark.integration

EVERY_TYPE = ("a BIGINT, b DECIMAL(10,2), c TIMESTAMP, d ARRAY<STRUCT<x: INT, y: STRING>>, e MAP<STRING, DOUBLE>, "
              "f BINARY, g DATE, h BOOLEAN, i TIMESTAMP_NTZ, j FLOAT, k SMALLINT, l TINYINT, "
              "m STRUCT<n: ARRAY<BIGINT>>, s STRING, u DECIMAL(38,18)")


@pytest.mark.parametrize("large", ["false", "true"])
@pytest.mark.parametrize("headers", [False, True])
def test_the_schema_is_the_one_to_arrow_gives(spark, large, headers):
    fmt = RecordFormat("json", EVERY_TYPE, 1000, headers)
    classified = classify(spark.createDataFrame([], kafka_row_ddl(headers)), fmt)
    before = spark.conf.get(LARGE_VAR_TYPES_SETTING, "false")
    spark.conf.set(LARGE_VAR_TYPES_SETTING, large)
    try:
        for df in (good_rows(classified, fmt), dead_letters(classified, fmt), spark.createDataFrame([], EVERY_TYPE)):
            expected = df.limit(0).toArrow().schema
            assert arrow_schema(df).equals(expected, check_metadata=True), (arrow_schema(df), expected)
    finally:
        spark.conf.set(LARGE_VAR_TYPES_SETTING, before)

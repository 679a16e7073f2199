"""Which batch path a pipeline file asks for, as the runner's start-up check of the executors'
Python warms its workers for it."""
from __future__ import annotations

import pytest

from pipelines.config import load_pipeline
from pipelines.runtime.pipeline_tables import batches_take_arrow_path
from tests.support.kafka_data import write_pipeline


@pytest.mark.parametrize("reader, extra, edit, arrow", [
    (None, "", None, True),                                           # the default reader, appends
    ("scg-kafka", "", None, True),
    ("spark-kafka", "", None, False),                                 # Spark's Kafka source: Spark SQL
    (None, "format: {type: raw}\ntransform: SELECT * FROM input\n", None, False),  # a transform
    (None, "", ("  dead_letter_path:", "  mode: upsert\n  key: [id]\n  dead_letter_path:"), False),
    (None, "", ("  path: {table}\n", "  tables:\n    - {{name: a, path: {table}, route: {{topics: [t]}}}}\n"),
     False),                                                          # routed to several tables: Spark SQL
])
def test_the_arrow_path_is_the_scg_kafka_reader_s_without_transform_routes_or_upserts(tmp_path, reader, extra,
                                                                                    edit, arrow):
    path = write_pipeline(tmp_path / "p.yaml", "127.0.0.1:9092", "t", "g", tmp_path, extra=extra, reader=reader)
    if edit:
        path.write_text(path.read_text().replace(*(e.format(table=tmp_path / "table") for e in edit)))
    assert batches_take_arrow_path(load_pipeline(path)) is arrow

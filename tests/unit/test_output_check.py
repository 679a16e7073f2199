"""``scg validate`` reports what the runtime's transform analysis rejects with the file, line and
field of the setting (pipelines/config/output_check.py; the pure part, no Spark)."""
from __future__ import annotations

import pickle
from pathlib import Path

from pipelines.config import ConfigError
from pipelines.config.output_check import OutputCheckError, located
from pipelines.config.yaml_nodes import load_yaml
from pipelines.runtime.pipeline_tables import (PartitionColumnMissingError, TransformInvalidError,
                                               TransformShapeError)

FILE = """\
name: p
topics: [t]
transform: |
  SELECT id FROM input
sink:
  path: /tmp/x
  partition_by:
    - topic
    - day
"""


def _root(tmp_path: Path):
    path = tmp_path / "p.yaml"
    path.write_text(FILE)
    return path, load_yaml(path)


def test_a_dropped_coordinate_points_at_the_transform_key(tmp_path):
    path, root = _root(tmp_path)
    error = located(TransformShapeError(["topic", "offset"]), path, root)
    assert isinstance(error, ConfigError) and error.exit_category == 2
    assert (error.condition, error.line, error.field_path) == ("TRANSFORM_DROPS_COORDINATES", 3, "transform")
    assert error.headline().startswith(f"{path}:3: transform: [TRANSFORM_DROPS_COORDINATES] ")
    assert "\n" not in error.headline()


def test_a_transform_that_does_not_analyse_points_at_the_transform_key(tmp_path):
    path, root = _root(tmp_path)
    cause = ValueError("[UNRESOLVED_COLUMN] A column `nope` cannot be resolved.\nplan ...")
    error = located(TransformInvalidError(cause, ["topic", "id"]), path, root)
    assert (error.condition, error.line, error.field_path) == ("TRANSFORM_INVALID", 3, "transform")
    assert "UNRESOLVED_COLUMN" in error.detail and "\n" not in str(error)


def test_a_partition_column_missing_from_the_output_points_at_its_item(tmp_path):
    path, root = _root(tmp_path)
    error = located(PartitionColumnMissingError("day", 1, ["topic", "id"]), path, root)
    assert (error.condition, error.line, error.field_path) == (
        "PARTITION_COLUMN_NOT_IN_OUTPUT", 9, "sink.partition_by[1]")


def test_the_error_survives_pickling(tmp_path):
    path, root = _root(tmp_path)
    error = pickle.loads(pickle.dumps(located(TransformShapeError(["topic"]), path, root)))
    assert (error.condition, error.line, error.field_path, error.file) == (
        "TRANSFORM_DROPS_COORDINATES", 3, "transform", str(path))

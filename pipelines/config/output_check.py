"""``scg validate``'s analysis of a pipeline's transform: the same checks ``scg run`` makes when it
opens its tables (:func:`pipelines.runtime.pipeline_tables.analyse_output`), run on a local Spark
session, reported as config errors with file, line and field.

Only a file with a ``transform:`` needs Spark (without one, ``partition_by`` columns are checked at
load); the session is local (``local[1]``, the file's ``spark.sql.*`` settings only, so its master,
event log or cluster settings are not used) and takes seconds to start, so a progress line says so.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groupmgr.core import ScgError
from pipelines.config.model import PipelineConfig
from pipelines.config.yaml_nodes import ConfigError, Node, load_yaml

ANALYSIS_SETTINGS = {"spark.master": "local[1]", "spark.ui.enabled": "false",
                     "spark.ui.showConsoleProgress": "false"}


class OutputCheckError(ConfigError):
    """A transform ``scg run`` would reject, found by ``scg validate``: ``condition`` is the run's
    own condition (``TRANSFORM_INVALID``, ``TRANSFORM_DROPS_COORDINATES``,
    ``PARTITION_COLUMN_NOT_IN_OUTPUT``), with the file, line and field of the setting."""

    def __init__(self, file: str | Path, line: int, field_path: str, condition: str, detail: str,
                 /, **params: Any) -> None:  # pylint: disable=super-init-not-called
        self.file, self.line, self.field_path = str(file), line, field_path
        self.condition, self.detail, self.params = str(condition), detail, params
        Exception.__init__(self, str(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (OutputCheckError, (self.file, self.line, self.field_path, self.condition, self.detail))


def check_output(config: PipelineConfig, path: str | Path,
                 progress: Callable[[str], None] | None = None) -> None:
    """Raise :class:`OutputCheckError` when ``scg run`` would reject the file's transform; does
    nothing (and starts no Spark) for a file without one."""
    if not config.transform:
        return
    from pipelines.runtime.pipeline_tables import analyse_output
    from pipelines.runtime.spark_session import get_or_create_spark

    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    say("validate: analysing the transform on a local Spark session (takes a few seconds) ...")
    settings = {k: v for k, v in config.spark_conf().items() if k.startswith("spark.sql.")}
    spark = get_or_create_spark("scg-validate", {**settings, **ANALYSIS_SETTINGS})
    try:
        analyse_output(config, spark)
    except ScgError as exc:
        raise located(exc, path, load_yaml(path)) from None
    finally:
        spark.stop()


def located(error: ScgError, path: str | Path, root: Node) -> OutputCheckError:
    """``error`` from the runtime's analysis with the file, line and field it is about: the
    ``transform:`` key, or the ``sink.partition_by`` item it names (pure)."""
    field_path = getattr(error, "field_path", None) or "transform"
    line = _line_of(root, field_path)
    detail = str(error).splitlines()[0] if str(error) else error.condition
    return OutputCheckError(path, line, field_path, error.condition, detail)


def _line_of(root: Node, field_path: str) -> int:
    top = dict(root.items())
    if field_path.startswith("sink.partition_by["):
        index = int(field_path.split("[", 1)[1].rstrip("]"))
        columns = dict(top["sink"].items()).get("partition_by") if "sink" in top else None
        if columns is not None and columns.kind == "seq" and index < len(columns.value):
            return columns.value[index].line
        return columns.line if columns is not None else 0
    node = top.get(field_path.split(".", 1)[0])
    return node.line if node is not None else 0

"""``scg validate``'s analysis of a pipeline's transform, routes or upsert key: the same checks
``scg run`` makes when it opens its tables (:func:`pipelines.runtime.pipeline_tables.analyse_output`),
run on a local Spark session, reported as config errors with file, line and field.

Only a file with a ``transform:``, ``sink.tables`` or ``sink.mode: upsert`` needs Spark (without
them, ``partition_by`` columns are checked at load); the session is local (``local[1]``, the
file's ``spark.sql.*`` settings only, so its master, event log or cluster settings are not used)
and takes seconds to start, so a progress line says so.
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
    """Raise :class:`OutputCheckError` when ``scg run`` would reject the file's transform, routes
    or upsert key and ordering; does nothing (and starts no Spark) for a file with none of them."""
    upsert = config.sink.mode == "upsert"
    if not config.transform and not config.sink.tables and not upsert:
        return
    from pipelines.runtime.pipeline_tables import analyse_output
    from pipelines.runtime.spark_session import get_or_create_spark

    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    what = ("the transforms and routes of sink.tables" if config.sink.tables else
            "the upsert key and ordering" if upsert else "the transform")
    say(f"validate: analysing {what} on a local Spark session (takes a few seconds) ...")
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
    """The line of ``field_path`` (``sink.tables[1].partition_by[0]``), or of the deepest part of
    it the file holds."""
    node, line = root, 0
    for part in field_path.split("."):
        name, _, index = part.partition("[")
        node = dict(node.items()).get(name) if node is not None and node.kind == "map" else None
        if node is not None and index:
            position = int(index.rstrip("]"))
            node = node.value[position] if node.kind == "seq" and position < len(node.value) else node
        if node is None:
            return line
        line = node.line
    return line

"""Entry points of the config layer: a pipeline file in, a validated :class:`PipelineConfig` out."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Mapping

import yaml

from pipelines.config.model import PipelineConfig
from pipelines.config.pipeline_validator import validate_pipeline
from pipelines.config.yaml_nodes import ConfigError, load_yaml


def load_pipeline(path: str | Path, env: Mapping[str, str] | None = None) -> PipelineConfig:
    """Load and validate the pipeline spec at ``path``; raises :class:`ConfigError` (a
    :class:`~pipelines.config.yaml_nodes.ConfigErrors` holding each problem when there are several).

    ``env`` (default ``os.environ``) resolves ``${NAME}`` references.
    """
    root = load_yaml(path)
    return validate_pipeline(root, str(path), Path(path).resolve(), os.environ if env is None else env)


def main_validate(path: str | Path, show: bool = False, print_yaml: bool = False) -> int:
    """``scg validate FILE``: "OK <summary>" on stdout (exit 0), or on stderr one line per problem
    of the file, in file order (exit 2).

    A file with a ``transform:`` is also analysed as ``scg run`` would (a local Spark session; see
    :mod:`pipelines.config.output_check`). With ``show`` the masked config is printed as JSON too.
    With ``print_yaml`` (``scg validate --print``) standard output is one YAML document: the OK
    line as a comment, then the resolved config (:meth:`PipelineConfig.describe`: every default
    filled in, paths resolved, every secret ``***``), so it can be saved or compared as it is.
    """
    from pipelines.config.output_check import check_output

    try:
        config = load_pipeline(path)
        check_output(config, path)
    except ConfigError as exc:
        for error in exc.errors:
            print(error.headline(), file=sys.stderr)
        return 2
    if print_yaml:
        print(f"# OK {config.summary()}")
        print(yaml.safe_dump(config.describe(), sort_keys=False, allow_unicode=True, explicit_start=True), end="")
        return 0
    print(f"OK {config.summary()}")
    if show:
        print(json.dumps(config.describe(), indent=2, sort_keys=False))
    return 0

"""The config layer: a YAML pipeline file -> a validated, frozen :class:`PipelineConfig`.

``load_pipeline(path)`` reads a pipeline spec (see conf/pipelines/demo.yaml) and returns a
:class:`PipelineConfig`, or raises :class:`ConfigError` naming the file, line, field and condition
(a :class:`ConfigErrors` holding every problem when the file has several).
Modules: :mod:`~pipelines.config.yaml_nodes` (YAML -> line-numbered nodes, ConfigError),
:mod:`~pipelines.config.fields` (typed field readers), :mod:`~pipelines.config.schema` (the JSON
schema field), :mod:`~pipelines.config.pipeline_validator` (nodes -> the dataclasses of
:mod:`~pipelines.config.model`; pure apart from reading ``${ENV}``/secret files and looking
assignors up), :mod:`~pipelines.config.secrets` (Secret values, masking).
"""
from pipelines.config.load import load_pipeline, main_validate
from pipelines.config.model import (FormatConfig, GroupConfig, KafkaConfig, PipelineConfig, SchemaField,
                                    SecurityConfig, SinkConfig, SourceConfig, TriggerConfig)
from pipelines.config.secrets import Secret
from pipelines.config.yaml_nodes import Condition, ConfigError, ConfigErrors

__all__ = [
    "Condition", "ConfigError", "ConfigErrors", "FormatConfig", "GroupConfig", "KafkaConfig", "PipelineConfig",
    "SchemaField", "Secret", "SecurityConfig", "SinkConfig", "SourceConfig", "TriggerConfig",
    "load_pipeline", "main_validate",
]

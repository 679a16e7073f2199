"""The configuration reference, docs/configuration.md, generated from the config model.

Regenerate the page with::

    .venv/bin/python -m pipelines.config.reference > docs/configuration.md

:func:`reference_markdown` walks :class:`~pipelines.config.model.PipelineConfig` and its section
dataclasses in field order and writes one table per section from each field's
:class:`~pipelines.config.model.KeyDoc`; the choices of enumerated keys are the validator's own.
Pure: it reads the model and the validator's key lists, nothing else. It raises ``ValueError`` when
the model and the validator disagree (a key the validator accepts that no field documents, or the
other way round), so the page cannot silently miss a key.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from pipelines.config import pipeline_validator as validator
from pipelines.config.model import DOC, DURATION, ENUM, SECTION, SECTIONS, KeyDoc, PipelineConfig
from pipelines.config.ranges import FIELD_LENGTHS, FIELD_RANGES, duration_text
from pipelines.config.yaml_limits import MAX_DEPTH, MAX_FILE_BYTES, MAX_KEY_CHARS, MAX_NODES

REGENERATE = ".venv/bin/python -m pipelines.config.reference > docs/configuration.md"
# The keys the validator accepts in each section ("" is the top level of the file).
SECTION_KEYS: Mapping[str, tuple[str, ...]] = {
    "": validator.TOP_KEYS, "kafka": validator.KAFKA_KEYS, "kafka.security": validator.SECURITY_KEYS,
    "group": validator.GROUP_KEYS, "source": validator.SOURCE_KEYS, "format": validator.FORMAT_KEYS,
    "format.schema_registry": validator.REGISTRY_KEYS, "format.key": validator.KEY_KEYS,
    "sink": validator.SINK_KEYS, "sink.tables": validator.TABLE_KEYS, "sink.tables.route": validator.ROUTE_KEYS,
    "trigger": validator.TRIGGER_KEYS, "storage": validator.STORAGE_KEYS,
    "metrics": validator.METRICS_KEYS,
}
# The values the validator accepts for each enumerated key.
CHOICES: Mapping[str, tuple[str, ...]] = {
    "kafka.security.protocol": validator.PROTOCOLS,
    "kafka.security.sasl_mechanism": validator.SASL_MECHANISMS,
    "group.on_server_assignment": validator.ON_SERVER_ASSIGNMENT,
    "source.starting_offsets": validator.STARTING_OFFSETS,
    "source.on_data_loss": validator.ON_DATA_LOSS,
    "source.reader": validator.READERS,
    "format.type": validator.FORMAT_TYPES,
    "format.subject_naming": validator.SUBJECT_NAMING,
    "sink.schema_evolution": validator.SCHEMA_EVOLUTION,
    "sink.route": validator.ROUTE_MODES,
    "sink.mode": validator.SINK_MODES,
    "format.envelope": validator.ENVELOPES,
    "format.key.type": validator.KEY_TYPES,
}
_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1))

LIMITS_RULE = f"""\
- A file is at most {MAX_FILE_BYTES:,} bytes, nests at most {MAX_DEPTH} levels and holds at most
  {MAX_NODES:,} nodes (aliases expanded); a key is at most {MAX_KEY_CHARS:,} characters
  (`YAML_LIMIT`). A value (a `transform`, a `format.schema`) has only the file's bound.
  Durations, counts and some strings have the range of the setting they map to, given with
  each key (`OUT_OF_RANGE`).
"""
INTRO = """\
A pipeline file is one YAML mapping. This page lists every key it may hold.
Unknown keys are refused, with a suggestion for a misspelt one.

Rules for every key:

- Durations are a number and a unit: `500ms`, `10s`, `5m`, `1h`, `1d`.
- Secrets are never inline. Write `${ENV_VAR}`, or `<key>_file: /path` to read the file.
  They are masked in every log line, `repr` and `scg validate` output.
- `${NAME}` is replaced from the environment in `kafka.bootstrap_servers`, `sasl_username`,
  `group.instance_id`, the PEM file paths and `storage.endpoint`, `region`, `access_key_id`.
- A relative local path resolves against the pipeline file's directory.
- Explicit `null` means "not given".
""" + LIMITS_RULE + """\
- A bad file stops `scg validate` and `scg run` with exit code 2. A line names the file, line,
  field and condition; `scg validate` prints one for every problem of the file at once. The
  conditions are in [operations.md](operations.md#named-conditions).

Examples: [conf/pipelines/demo.yaml](../conf/pipelines/demo.yaml),
[conf/pipelines/example-secure.yaml](../conf/pipelines/example-secure.yaml).
"""


@dataclasses.dataclass(frozen=True)
class DocumentedKey:
    """One key of a pipeline file: its dotted path, the section that holds it, the model field it
    sets and that field's documentation."""

    path: str
    section: str
    field: dataclasses.Field
    doc: KeyDoc


def documented_keys(model: type = PipelineConfig, section: str = "") -> Iterator[DocumentedKey]:
    """Every field of ``model`` and of its section dataclasses, depth first in field order.
    A field that has no :class:`KeyDoc` raises ``ValueError``."""
    for field in dataclasses.fields(model):
        doc = field.metadata.get(DOC)
        if doc is None:
            raise ValueError(f"{model.__name__}.{field.name} has no KeyDoc (pipelines.config.model.key_doc)")
        path = field.name if doc.key is None else _join(section, doc.key)
        yield DocumentedKey(path, section, field, doc)
        if doc.kind in (SECTION, SECTIONS):
            yield from documented_keys(_section_type(model, field), path)


def reference_markdown() -> str:
    """The whole of docs/configuration.md."""
    keys = list(documented_keys())
    _check_against_validator(keys)
    parts = ["# Configuration reference\n",
             "Generated from the config model (`pipelines/config/model.py`, each field's `KeyDoc`) by "
             "`pipelines/config/reference.py`. Do not edit it by hand. Regenerate it with:\n",
             f"```bash\n{REGENERATE}\n```\n",
             "`tests/unit/test_docs_configuration.py` fails when this page and the model differ.\n",
             INTRO]
    for section in SECTION_KEYS:
        parts.append(_section_markdown(section, keys))
    internal = [key for key in keys if key.doc.key is None]
    if internal:
        parts.append("## Not set in a file\n")
        parts.append("\n".join(f"- `{key.path}` ({key.doc.kind}): {key.doc.text}" for key in internal) + "\n")
    return "\n".join(parts)


def _section_markdown(section: str, keys: list[DocumentedKey]) -> str:
    title = f"`{section}`" if section else "Top level"
    lines = [f"## {title}\n"]
    opener = next((key for key in keys if key.path == section), None)
    if opener is not None:
        lines.append(f"{opener.doc.text} Maps to: {opener.doc.maps_to}. Default: {_default(opener)}.\n")
    lines.append("| key | type | default | example | maps to | what it does |")
    lines.append("|---|---|---|---|---|---|")
    for key in keys:
        if key.section == section and key.doc.key is not None:
            lines.append("| " + " | ".join(_cell(text) for text in _row(key)) + " |")
    return "\n".join(lines) + "\n"


def _row(key: DocumentedKey) -> tuple[str, ...]:
    doc = key.doc
    name = f"`{key.path}`" + "".join(f"<br>or `{_join(key.section, alias)}`" for alias in doc.aliases)
    kind = doc.kind
    if kind == ENUM:
        kind = "one of " + ", ".join(f"`{choice}`" for choice in CHOICES[key.path])
    elif kind in (SECTION, SECTIONS):
        kind = f"{kind}, see [below](#{key.path.replace('.', '')})"
    return name, kind, _default(key), f"`{doc.example}`", doc.maps_to, doc.text + _range_text(key)


def _range_text(key: DocumentedKey) -> str:
    """The key's range (:mod:`pipelines.config.ranges`), as a sentence to add to its text."""
    if key.path in FIELD_LENGTHS:
        bound = FIELD_LENGTHS[key.path]
        return f" At most {bound.high:,} bytes: {bound.why}."
    if key.path not in FIELD_RANGES:
        return ""
    bound = FIELD_RANGES[key.path]
    high = duration_text(bound.high) if key.doc.kind.startswith(DURATION) else f"{bound.high:,}"
    return f" At most {high}: {bound.why}."


def _default(key: DocumentedKey) -> str:
    field, doc = key.field, key.doc
    if doc.default is not None:
        return doc.default
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    return _value_text(value, doc.kind)


def _value_text(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, (tuple, Mapping)) and not value):
        return "not set" if value is None else "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if kind.startswith(DURATION) and isinstance(value, int):
        return f"`{_duration(value)}`"
    if isinstance(value, tuple):
        return f"`[{', '.join(map(str, value))}]`" if len(value) > 1 else f"`{value[0]}`"
    return f"`{value}`"


def _duration(ms: int) -> str:
    if ms == 0:
        return "0s"
    unit, size = next((unit, size) for unit, size in _UNITS if ms % size == 0)
    return f"{ms // size}{unit}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _join(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def _section_type(model: type, field: dataclasses.Field) -> type:
    """The dataclass a section field holds (annotations are strings under ``from __future__``)."""
    import typing

    kind = typing.get_type_hints(model)[field.name]
    optional = [arg for arg in typing.get_args(kind) if arg is not type(None) and arg is not Ellipsis]
    kind = optional[0] if len(optional) == 1 else kind  # `Section | None`, or `tuple[Section, ...]`
    if not dataclasses.is_dataclass(kind):
        raise ValueError(f"{model.__name__}.{field.name} is documented as a section but holds {kind}")
    return kind


def _check_against_validator(keys: list[DocumentedKey]) -> None:
    """Each section documents exactly the keys the validator accepts there."""
    for section, accepted in SECTION_KEYS.items():
        documented = {_join(section, name) for key in keys if key.section == section and key.doc.key
                      for name in (key.doc.key, *key.doc.aliases)}
        expected = {_join(section, name) for name in accepted}
        if documented != expected:
            raise ValueError(f"section {section or '(top level)'}: keys the validator accepts but no field "
                             f"documents: {sorted(expected - documented)}; documented but not accepted: "
                             f"{sorted(documented - expected)}")
    sections = {key.path for key in keys if key.doc.kind in (SECTION, SECTIONS)}
    if sections != set(SECTION_KEYS) - {""}:
        raise ValueError(f"sections in the model {sorted(sections)} differ from {sorted(SECTION_KEYS)}")
    enums = {key.path for key in keys if key.doc.kind == ENUM}
    if enums != set(CHOICES):
        raise ValueError(f"enumerated keys {sorted(enums)} differ from those with choices {sorted(CHOICES)}")


def main() -> None:
    print(reference_markdown(), end="")


if __name__ == "__main__":
    main()

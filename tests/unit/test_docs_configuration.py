"""docs/configuration.md is what pipelines.config.reference generates from the config model, and
it names every field of the model and every key the validator accepts."""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from pipelines.config.model import DOC, PipelineConfig, key_doc
from pipelines.config.reference import REGENERATE, SECTION_KEYS, documented_keys, reference_markdown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def model_fields(model: type = PipelineConfig, section: str = ""):
    """(key path, class.field) of every field reachable from PipelineConfig through section
    dataclasses, found by walking the type hints (not through the generator)."""
    hints = typing.get_type_hints(model)
    for field in dataclasses.fields(model):
        doc = field.metadata.get(DOC)
        where = f"{model.__name__}.{field.name}"
        key = field.name if doc is None or doc.key is None else doc.key
        path = f"{section}.{key}" if section else key
        yield path, where, doc
        if dataclasses.is_dataclass(hints[field.name]):
            yield from model_fields(hints[field.name], path)


def test_the_page_is_the_generators_output():
    assert PAGE.read_text() == reference_markdown(), f"docs/configuration.md is stale; run {REGENERATE}"


def test_every_model_field_has_a_key_doc():
    undocumented = [where for _, where, doc in model_fields() if doc is None]
    assert not undocumented, f"fields without a KeyDoc (pipelines.config.model.key_doc): {undocumented}"


def test_every_model_field_is_on_the_page():
    page = PAGE.read_text()
    missing = [f"{path} ({where})" for path, where, _ in model_fields() if f"`{path}`" not in page]
    assert not missing, f"model fields not on docs/configuration.md: {missing}"


def test_every_key_the_validator_accepts_is_on_the_page():
    page = PAGE.read_text()
    keys = [f"{section}.{key}" if section else key for section, keys in SECTION_KEYS.items() for key in keys]
    missing = [key for key in keys if f"`{key}`" not in page]
    assert not missing, f"keys the validator accepts but docs/configuration.md does not name: {missing}"


def test_a_field_without_a_key_doc_stops_the_generator():
    @dataclasses.dataclass(frozen=True)
    class Section:
        documented: int = dataclasses.field(default=1, metadata=key_doc("documented", "x", "1", "y", "z"))
        forgotten: int = 2

    with pytest.raises(ValueError, match="forgotten"):
        list(documented_keys(Section))

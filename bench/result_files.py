"""Where a benchmark leaves its results: ``STEM.json`` (everything measured) and ``STEM.md`` (the
table), in one directory (bench/results by default)."""
from __future__ import annotations

import json
from pathlib import Path


def write_results(out: Path, stem: str, results: dict, table: str) -> None:
    """Write ``results`` as JSON and ``table`` as markdown, and print the table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(results, indent=2))
    (out / f"{stem}.md").write_text(table)
    print(table)

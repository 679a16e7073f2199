"""bin/bootstrap's jar step: ``python -m pipelines.local.resolve_jars --link <root>/.scg/jars``.

Resolves every kind of jar the shipped POMs pin into the user cache
(:func:`pipelines.runtime.jar_cache.ensure_jars`, the same code an installed ``scg`` runs on first
need) and points the link at the cache entry. Silent when everything is cached; a failure prints
one ``[bootstrap] error:`` line (and the end of Maven's output) and exits 3.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from groupmgr.core import ScgError
from pipelines.runtime.install_paths import cache_dir, conf_dir, maven_settings
from pipelines.runtime.jar_cache import KINDS, ensure_jars

MAVEN_LINES = 5


def say(message: str) -> None:
    print(f"[bootstrap] {message}", file=sys.stderr, flush=True)


def link(target: Path, link_path: Path) -> None:
    """Points ``link_path`` at ``target``, replacing an older link in one rename (``ln -sfn``)."""
    link_path.parent.mkdir(parents=True, exist_ok=True)
    fresh = link_path.with_name(f".{link_path.name}.new")
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(target)
    os.replace(fresh, link_path)


def report_failure(exc: ScgError) -> int:
    """A failed install step for bin/bootstrap: the last :data:`MAVEN_LINES` of Maven's output
    when the error names that file (``details``), then one ``error:`` line; the exit code."""
    if exc.details:
        lines = Path(exc.details).read_text(errors="replace").splitlines()[-MAVEN_LINES:]
        print("\n".join(lines), file=sys.stderr)
    say(f"error: {exc} Maven's output: {exc.details}" if exc.details else f"error: {exc}")
    return int(exc.exit_category)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.local.resolve_jars", description=__doc__)
    parser.add_argument("--link", type=Path, help="a symbolic link to point at the cache entry")
    args = parser.parse_args(argv)
    cache_dir().mkdir(parents=True, exist_ok=True)
    try:
        entry = ensure_jars(KINDS, pom_dir=conf_dir() / "jvm", cache_root=cache_dir(),
                            settings=maven_settings(), progress=say)
    except ScgError as exc:
        return report_failure(exc)
    if args.link:
        link(entry, args.link)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``spark-submit`` entry point of one pipeline member:

    spark-submit --packages <pinned connectors> pipelines/cli/submit.py conf/pipelines/x.yaml

Same as ``scg run FILE``; exits with the same codes.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # started as a script by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipelines.cli.main import main  # noqa: E402 - after the path set-up above

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))

"""Logging of an scg process (pipelines/cli/log_setup.py): text lines carry the date and zone,
JSON lines are one object per event with the member's fields, and progress events keep theirs."""
import io
import json
import logging
import re

import pytest

from groupmgr.core import TopicPartition
from pipelines.cli.log_setup import configure_logging, log_format
from pipelines.runtime.progress import ProgressPrinter

A = TopicPartition("orders", 0)


def lines_as(fmt):
    stream = io.StringIO()
    handler = configure_logging(fmt, "orders", "host-1", stream)
    try:
        progress = ProgressPrinter(out=None)
        progress.assigned(7, [A])
        progress.note("orders-0 stopped: [LEADER_NOT_AVAILABLE] no leader; checked again with backoff")
        logging.getLogger("groupmgr.member_loop").info("group g: generation 7 revokes nothing")
        logging.getLogger("py4j").info("a library's chatter")
    finally:
        logging.getLogger().removeHandler(handler)
    return stream.getvalue().splitlines()


def test_text_lines_carry_date_time_and_zone():
    lines = lines_as("text")
    assert len(lines) == 3  # another library's INFO stays out
    stamp = r"\[scg \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}\] "
    assert re.fullmatch(stamp + r"generation 7: assigned 1 partition\(s\) \[orders-0\]", lines[0])
    assert re.fullmatch(stamp + "INFO groupmgr.member_loop: group g: generation 7 revokes nothing", lines[2])


def test_json_lines_are_one_object_per_event_with_the_members_fields():
    events = [json.loads(line) for line in lines_as("json")]
    assert len(events) == 3
    assigned, stopped, group = events
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", assigned["time"])
    assert {k: assigned[k] for k in ("level", "logger", "pipeline", "member", "event", "generation", "partitions")} \
        == {"level": "INFO", "logger": "scg.progress", "pipeline": "orders", "member": "host-1",
            "event": "assigned", "generation": 7, "partitions": ["orders-0"]}
    assert stopped["condition"] == "LEADER_NOT_AVAILABLE" and stopped["event"] == "note"
    assert group["logger"] == "groupmgr.member_loop" and group["pipeline"] == "orders"


def test_the_format_comes_from_the_command_line_then_the_environment(monkeypatch):
    from pipelines.cli.arguments import BadArgumentsError

    monkeypatch.delenv("SCG_LOG_FORMAT", raising=False)
    assert log_format(None) == "text"
    monkeypatch.setenv("SCG_LOG_FORMAT", "JSON")
    assert log_format(None) == "json" and log_format("text") == "text"
    monkeypatch.setenv("SCG_LOG_FORMAT", "xml")
    with pytest.raises(BadArgumentsError):
        log_format(None)


def test_a_printer_with_an_out_prints_text_lines_with_the_date():
    lines = []
    ProgressPrinter(lines.append).revoked([A])
    assert re.fullmatch(r"\[scg \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}\] revoked 1 partition\(s\); stopping the query",
                        lines[0])

"""Rendering of a GroupDescription (the broker-facing part is tested in tests/integration)."""
from __future__ import annotations

import json

from groupmgr.describe import GroupDescription, MemberInfo, PartitionOffsets, _partition, format_table, to_json

DESC = GroupDescription(
    group_id="g", state="STABLE", group_type="CLASSIC", protocol_type="consumer", protocol="range",
    coordinator="1 (127.0.0.1:9092)",
    members=(MemberInfo("m-1", "inst-1", "c1", "/10.0.0.1", (("t", 0), ("t", 1))),
             MemberInfo("m-2", None, "c2", "/10.0.0.2", ())),
    partitions=(PartitionOffsets("t", 0, 5, 10, 5, "m-1"), PartitionOffsets("t", 1, None, 3, None, "m-1"),
                PartitionOffsets("t", 2, 7, 7, 0, None)))


def test_lag_is_log_end_minus_committed_or_unknown():
    assert _partition(("t", 0), 4, 10, "m").lag == 6
    assert _partition(("t", 0), None, 10, "m").lag is None
    assert _partition(("t", 0), 4, None, None).lag is None


def test_table_lists_every_partition_and_idle_member():
    lines = format_table(DESC).splitlines()
    assert "STATE STABLE" in lines[0] and "consumer/range" in lines[0] and "MEMBERS 2" in lines[0]
    assert lines[2].split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                                "INSTANCE-ID", "HOST"]
    rows = [line.split() for line in lines[3:]]
    assert rows[0] == ["t", "0", "5", "10", "5", "m-1", "inst-1", "/10.0.0.1"]
    assert rows[1][:5] == ["t", "1", "-", "3", "-"]
    assert rows[2] == ["t", "2", "7", "7", "0", "-", "-", "-"]
    assert rows[3][5] == "m-2"  # a member without partitions still shows


def test_json_is_serialisable_and_complete():
    data = json.loads(json.dumps(to_json(DESC)))
    assert data["members"][0]["partitions"] == [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]
    assert data["partitions"][1] == {"topic": "t", "partition": 1, "committed": None, "log_end": 3, "lag": None,
                                     "owner": "m-1", "metadata": ""}
    assert data["protocol_type"] == "consumer" and data["state"] == "STABLE"
    assert data["conditions"] == []


def test_a_consumer_protocol_group_is_named_in_the_table_and_json():
    import dataclasses

    desc = dataclasses.replace(DESC, group_type="CONSUMER", protocol="uniform")
    head = format_table(desc).splitlines()[:2]
    assert "TYPE CONSUMER" in head[0] and head[1].startswith("[GROUP_RUN_BY_BROKER] group g is run by the broker")
    assert [c["condition"] for c in to_json(desc)["conditions"]] == ["GROUP_RUN_BY_BROKER"]

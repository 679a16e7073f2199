"""ConsumerProtocol Subscription/Assignment bytes: round trips, Kafka's exact layout, bad input."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupmgr.assignors import Subscription, TopicPartition as TP
from groupmgr.consumer_protocol import (decode_assignment, decode_subscription, encode_assignment,
                                        encode_subscription)
from groupmgr.group_errors import ProtocolDecodeError

SUB = Subscription(("b", "a"), b"ud", (TP("a", 1), TP("a", 0), TP("b", 3)), "inst", "rack1", 7)

names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=12)
tps = st.lists(st.tuples(names, st.integers(0, 2**31 - 1)).map(lambda t: TP(*t)), unique=True, max_size=20)


def test_v0_bytes_match_kafka_layout():
    # int16 version, [string] topics, nullable bytes user data - as Java's ConsumerProtocol writes them
    expected = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    assert encode_subscription(Subscription(("t",)), version=0) == expected


def test_v3_bytes_match_kafka_layout():
    data = encode_subscription(Subscription(("t",), None, (TP("t", 2),), None, "r", 5), version=3)
    assert data == (b"\x00\x03" + b"\x00\x00\x00\x01\x00\x01t" + b"\xff\xff\xff\xff"
                    + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x01\x00\x00\x00\x02"
                    + b"\x00\x00\x00\x05" + b"\x00\x01r")


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_round_trip_keeps_fields_of_version(version):
    decoded = decode_subscription(encode_subscription(SUB, version), group_instance_id="inst")
    sub = decoded.subscription
    assert decoded.version == version
    assert sub.topics == ("b", "a") and sub.user_data == b"ud" and sub.group_instance_id == "inst"
    assert sub.owned_partitions == ((TP("a", 0), TP("a", 1), TP("b", 3)) if version >= 1 else ())
    assert sub.generation_id == (7 if version >= 2 else -1)
    assert sub.rack_id == ("rack1" if version >= 3 else None)


def test_newer_subscription_version_read_with_latest_format():
    v4 = b"\x00\x04" + encode_subscription(SUB, 3)[2:] + b"\x00\x00\x00\x09"  # unknown trailing field
    decoded = decode_subscription(v4)
    assert decoded.version == 4 and decoded.subscription.rack_id == "rack1"


@given(topics=st.lists(names, min_size=1, max_size=5), owned=tps, gen=st.integers(-1, 2**31 - 1),
       user_data=st.one_of(st.none(), st.binary(max_size=50)), rack=st.one_of(st.none(), names))
def test_subscription_round_trip_property(topics, owned, gen, user_data, rack):
    sub = Subscription(tuple(topics), user_data, tuple(owned), None, rack, gen)
    back = decode_subscription(encode_subscription(sub)).subscription
    assert back == Subscription(tuple(topics), user_data, tuple(sorted(owned)), None, rack, gen)


@given(partitions=tps, user_data=st.one_of(st.none(), st.binary(max_size=50)), version=st.integers(0, 3))
def test_assignment_round_trip_property(partitions, user_data, version):
    decoded = decode_assignment(encode_assignment(partitions, user_data, version))
    assert decoded.partitions == tuple(sorted(partitions))
    assert decoded.user_data == user_data and decoded.version == version


def test_assignment_bytes_group_by_topic_sorted():
    data = encode_assignment([TP("b", 0), TP("a", 2), TP("a", 0)], version=0)
    assert data == (b"\x00\x00" + b"\x00\x00\x00\x02"
                    + b"\x00\x01a" + b"\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x02"
                    + b"\x00\x01b" + b"\x00\x00\x00\x01\x00\x00\x00\x00" + b"\xff\xff\xff\xff")


def test_empty_assignment_bytes_mean_no_partitions():
    assert decode_assignment(b"").partitions == ()
    assert decode_assignment(None).partitions == ()


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x01\x00", b"\x00\x01\x00\x00\x00\x05\x00", b"\xff\xff\x00\x00"])
def test_truncated_or_bad_bytes_raise_named_error(data):
    with pytest.raises(ProtocolDecodeError):
        decode_subscription(data)
    with pytest.raises(ProtocolDecodeError):
        decode_assignment(data)


def test_version_out_of_range_rejected_on_encode():
    with pytest.raises(ValueError):
        encode_subscription(SUB, version=4)
    with pytest.raises(ValueError):
        encode_assignment([], version=-1)

"""The fetch shim's frame parsing, on frames built byte by byte as Apache Kafka's message definitions lay them out.

References: clients/src/main/resources/common/message/RequestHeader.json, ResponseHeader.json,
FetchRequest.json, FetchResponse.json, MetadataResponse.json, FindCoordinatorResponse.json,
DescribeClusterResponse.json.
"""

from __future__ import annotations

import struct

import pytest

from airflow_kerr.local.fetch_shim import (
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    METADATA,
    FrameError,
    fetch_response_is_empty,
    parse_request,
    rewrite_broker_ports,
)

NOIDA, SHIM = 40001, 50002


def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(text: str | None) -> bytes:
    """STRING / NULLABLE_STRING: int16 length (-1 null)."""
    return i16(-1) if text is None else i16(len(text)) + text.encode()


def compact_string(text: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING: unsigned varint length + 1 (0 null)."""
    return uvarint(0) if text is None else uvarint(len(text) + 1) + text.encode()


def compact_array(items: list[bytes] | None) -> bytes:
    return uvarint(0) if items is None else uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = uvarint(0)
ONE_TAG = uvarint(1) + uvarint(0) + uvarint(3) + b"abc"  # one tagged field: tag 0, 3 bytes


def fetch_request(version: int, max_wait_ms: int, tags: bytes = NO_TAGS) -> bytes:
    """Header v2 (ClientId stays a non-compact nullable string) and the start of a flexible Fetch request."""
    header = i16(FETCH) + i16(version) + i32(7) + string("rdkafka") + tags
    if version <= 14:
        return header + i32(-1) + i32(max_wait_ms) + i32(1) + b"rest-of-request"
    return header + i32(max_wait_ms) + i32(1) + b"rest-of-request"


@pytest.mark.parametrize("version", [12, 13, 15])
def test_fetch_request_max_wait_is_read_for_each_layout(version: int) -> None:
    info = parse_request(fetch_request(version, 500, tags=ONE_TAG))
    assert (info.api_key, info.api_version, info.correlation_id, info.max_wait_ms) == (FETCH, version, 7, 500)


def test_other_requests_keep_only_their_header() -> None:
    info = parse_request(i16(METADATA) + i16(12) + i32(42) + string(None) + NO_TAGS)
    assert (info.api_key, info.api_version, info.correlation_id, info.max_wait_ms) == (METADATA, 12, 42, 0)


def records(size: int | None) -> bytes:
    """A flexible RecordSet: COMPACT_NULLABLE_BYTES."""
    return uvarint(0) if size is None else uvarint(size + 1) + b"r" * size


def fetch_partition(record_bytes: int | None, error: int = 0, aborted: list[int] | None = None) -> bytes:
    aborted_array = compact_array(None if aborted is None else [i64(pid) + i64(0) + NO_TAGS for pid in aborted])
    return (
        i32(0) + i16(error) + i64(10) + i64(10) + i64(0)  # index, error, high watermark, LSO, log start
        + aborted_array + i32(-1) + records(record_bytes) + ONE_TAG  # aborted, preferred replica, records
    )  # fmt: skip


def fetch_response(version: int, partitions: list[bytes], error: int = 0) -> bytes:
    topic = (b"\x01" * 16) if version >= 13 else compact_string("orders.dlq")
    topics = compact_array([topic + compact_array(partitions) + NO_TAGS]) if partitions else compact_array([])
    header = i32(7) + NO_TAGS  # response header v1
    return header + i32(0) + i16(error) + i32(0) + topics + NO_TAGS  # throttle, error, session id


@pytest.mark.parametrize("version", [12, 13])
def test_a_fetch_answer_without_records_is_empty(version: int) -> None:
    assert fetch_response_is_empty(fetch_response(version, [fetch_partition(0), fetch_partition(None)]), version)
    assert fetch_response_is_empty(fetch_response(version, [fetch_partition(0, aborted=[5, 6])]), version)
    assert fetch_response_is_empty(fetch_response(version, []), version)  # incremental: nothing changed


@pytest.mark.parametrize("version", [12, 13])
def test_records_or_errors_make_a_fetch_answer_not_empty(version: int) -> None:
    assert not fetch_response_is_empty(fetch_response(version, [fetch_partition(0), fetch_partition(61)]), version)
    assert not fetch_response_is_empty(fetch_response(version, [fetch_partition(0, error=6)]), version)
    assert not fetch_response_is_empty(fetch_response(version, [fetch_partition(0)], error=70), version)


def test_a_truncated_frame_is_a_frame_error() -> None:
    frame = fetch_response(12, [fetch_partition(0)])
    with pytest.raises(FrameError):
        fetch_response_is_empty(frame[:-6], 12)


def ports_in(frame: bytes | bytearray, *ports: int) -> list[int]:
    return [port for port in ports if i32(port) in frame]


def test_metadata_v12_broker_ports_are_rewritten() -> None:
    broker = i32(1) + compact_string("127.0.0.1") + i32(NOIDA) + compact_string(None) + NO_TAGS
    other = i32(2) + compact_string("127.0.0.1") + i32(9092) + compact_string("r1") + NO_TAGS
    frame = bytearray(i32(3) + NO_TAGS + i32(0) + compact_array([broker, other]) + b"cluster-and-topics")
    assert rewrite_broker_ports(frame, METADATA, 12, NOIDA, SHIM) == 1
    assert ports_in(frame, NOIDA, SHIM, 9092) == [SHIM, 9092]
    assert frame.endswith(b"cluster-and-topics")


def test_find_coordinator_v2_port_is_rewritten() -> None:
    frame = bytearray(i32(3) + i32(0) + i16(0) + string(None) + i32(1) + string("127.0.0.1") + i32(NOIDA))
    assert rewrite_broker_ports(frame, FIND_COORDINATOR, 2, NOIDA, SHIM) == 1
    assert ports_in(frame, NOIDA, SHIM) == [SHIM]


def test_find_coordinator_v4_coordinator_ports_are_rewritten() -> None:
    def coordinator(key: str) -> bytes:
        host = compact_string("127.0.0.1")
        return compact_string(key) + i32(1) + host + i32(NOIDA) + i16(0) + compact_string(None) + NO_TAGS

    frame = bytearray(i32(3) + NO_TAGS + i32(0) + compact_array([coordinator("g1"), coordinator("g2")]) + NO_TAGS)
    assert rewrite_broker_ports(frame, FIND_COORDINATOR, 4, NOIDA, SHIM) == 2
    assert ports_in(frame, NOIDA, SHIM) == [SHIM]


def test_describe_cluster_v0_broker_ports_are_rewritten() -> None:
    broker = i32(1) + compact_string("127.0.0.1") + i32(NOIDA) + compact_string(None) + NO_TAGS
    body = i32(0) + i16(0) + compact_string(None) + compact_string("cluster") + i32(1) + compact_array([broker])
    frame = bytearray(i32(3) + NO_TAGS + body + i32(-2147483648) + NO_TAGS)  # authorized operations, tags
    assert rewrite_broker_ports(frame, DESCRIBE_CLUSTER, 0, NOIDA, SHIM) == 1
    assert ports_in(frame, NOIDA, SHIM) == [SHIM]


def test_uvarint_lengths_over_one_byte_are_read() -> None:
    frame = fetch_response(12, [fetch_partition(300)])  # 301 needs a two-byte varint
    assert not fetch_response_is_empty(frame, 12)

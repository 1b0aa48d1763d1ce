"""A Kafka-protocol shim in front of noida-db that makes empty fetches wait, as a real broker's do.

Why: noida-db 0.2.3 ignores a Fetch's ``max_wait_ms`` and answers an empty Fetch at
once, so every idle Java or librdkafka consumer spins on it (one idle consumer sent
about 11,800 fetches a second, ``benchmarks/idle_fetch.py``; the idle Kafka Connect
worker of ``kerr local up`` took 0.98 of a core and noida-db 0.27). No client setting
fixes that for every client (``fetch.min.bytes`` only makes a broker wait, and this one
does not), so the wait is put back here, between the clients and noida-db.

What it does, per client connection, forwarding every byte unchanged otherwise:

- A Fetch (api key 1) response whose partitions carry no records and no errors is held
  until ``min(max_wait_ms of its request, HOLD_CAP_MS)`` after the request arrived, or
  until a write (Produce, EndTxn) is acknowledged, whichever comes first (see WAKING_APIS).
  The responses of one connection are written in the order noida-db sent them (as a real
  broker's are), so whatever follows a held response waits behind it.
- Metadata (3), FindCoordinator (10) and DescribeCluster (60) responses name noida-db's
  own port (it has no advertised-listener option): the port is rewritten to the shim's,
  in place (an int32), so clients stay on the shim.

Field layouts follow Apache Kafka's message definitions in
``clients/src/main/resources/common/message/``: ``RequestHeader.json`` (header v1;
v2 adds tagged fields for flexible request versions, while ``ClientId`` stays a
non-compact nullable string), ``ResponseHeader.json`` (v1 adds tagged fields; an
ApiVersions response always uses v0), ``FetchRequest.json`` (``ReplicaId`` precedes
``MaxWaitMs`` up to v14; v15 moved it into the tagged ``ReplicaState``),
``FetchResponse.json`` (flexible from v12, topic ids instead of names from v13),
``MetadataResponse.json`` (flexible from v9), ``FindCoordinatorResponse.json``
(flexible from v3, a ``Coordinators`` array from v4) and ``DescribeClusterResponse.json``.

Run as ``python -m airflow_kerr.local.fetch_shim --port P --upstream-port Q -- <noida-db
command>``: the shim starts noida-db as its child (which dies with it), serves on
127.0.0.1:P, and exits when noida-db does, so one process id stands for the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import struct
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS, END_TXN, DESCRIBE_CLUSTER = 0, 1, 3, 10, 18, 26, 60
#: The longest an empty Fetch answer is held (the clients' default ``fetch.max.wait.ms`` is 500 ms).
#: An idle consumer sends at most about 1000 / HOLD_CAP_MS fetches a second.
HOLD_CAP_MS = 500
#: Answers to these requests mean new data may be readable (records appended; a transaction's
#: marker written, which moves the last stable offset): every held empty Fetch is then let go
#: at once, so its consumer asks again and sees the data without waiting out the hold, as a
#: real broker answers a waiting Fetch when data arrives. All writes reach noida-db through
#: the shim, so none is missed; a write to any topic wakes every held Fetch (noida-db's topic
#: ids are not tracked), so while something is being written idle consumers fetch as often as
#: writes are acknowledged, not more.
WAKING_APIS = frozenset({PRODUCE, END_TXN})
#: Responses up to this size are read whole (to inspect or rewrite them); larger ones are
#: streamed through in chunks. A Fetch answer this large carries records, so it is never held.
INSPECT_LIMIT = 1 << 20
_CHUNK = 1 << 20
#: The versions the shim reads, per API: exactly those the local clients negotiate with noida-db 0.2.3
#: (it advertises Fetch up to v13): librdkafka 2.16 (confluent-kafka) uses Fetch v12, Metadata v12,
#: FindCoordinator v2; Java 3.9 (Kafka Connect) Fetch v12-13, Metadata v12, FindCoordinator v4,
#: DescribeCluster v0 (seen with ``--log-versions``). Any other version passes through untouched.
SUPPORTED_VERSIONS: dict[int, frozenset[int]] = {
    FETCH: frozenset({12, 13}),
    METADATA: frozenset({12}),
    FIND_COORDINATOR: frozenset({2, 4}),
    DESCRIBE_CLUSTER: frozenset({0}),
}
#: First version of each API whose messages are flexible (compact strings/arrays, tagged fields).
_FLEXIBLE_FROM = {FETCH: 12, METADATA: 9, FIND_COORDINATOR: 3, DESCRIBE_CLUSTER: 0, API_VERSIONS: 3}


class FrameError(ValueError):
    """A frame ended before the field being read, or held a length no field can have."""


class _Reader:
    """Reads Kafka's primitive types from one frame, tracking the position (for in-place rewrites)."""

    def __init__(self, data: bytes | bytearray, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, size: int) -> int:
        """Skip ``size`` bytes; return where they began."""
        if size < 0 or self.pos + size > len(self.data):
            raise FrameError(f"needs {size} bytes at {self.pos}, frame has {len(self.data)}")
        start = self.pos
        self.pos += size
        return start

    def int8(self) -> int:
        return struct.unpack_from(">b", self.data, self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack_from(">h", self.data, self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack_from(">i", self.data, self.take(4))[0]

    def uvarint(self) -> int:
        """An unsigned varint (the lengths of compact types and tagged fields)."""
        value = shift = 0
        while True:
            byte = self.data[self.take(1)]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise FrameError("varint longer than 5 bytes")

    def string(self, flexible: bool) -> None:
        """Skip a (nullable) string: int16 length, or unsigned-varint length + 1 when compact."""
        size = self.uvarint() - 1 if flexible else self.int16()
        if size > 0:
            self.take(size)

    def array_length(self, flexible: bool) -> int:
        """An array's element count (-1 for null): int32, or unsigned-varint count + 1 when compact."""
        return self.uvarint() - 1 if flexible else self.int32()

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())


def is_flexible(api_key: int, api_version: int) -> bool:
    """True when this API version uses the flexible encoding (only the APIs the shim reads are known)."""
    first = _FLEXIBLE_FROM.get(api_key)
    return first is not None and api_version >= first


@dataclass(frozen=True)
class RequestInfo:
    """What the shim keeps of a request until its response comes back."""

    api_key: int
    api_version: int
    correlation_id: int
    #: For a Fetch, its MaxWaitMs; else 0.
    max_wait_ms: int = 0


def parse_request(frame: bytes | bytearray) -> RequestInfo:
    """Read a request's header (``RequestHeader.json``) and, for a Fetch, its ``MaxWaitMs``.

    ``frame`` is the request without its int32 size prefix.
    """
    reader = _Reader(frame)
    api_key, api_version, correlation_id = reader.int16(), reader.int16(), reader.int32()
    if api_key != FETCH:
        return RequestInfo(api_key, api_version, correlation_id)
    reader.string(flexible=False)  # ClientId: never compact, even in header v2
    if is_flexible(api_key, api_version):
        reader.tagged_fields()
    if api_version <= 14:
        reader.int32()  # ReplicaId (v15 moved it into the tagged ReplicaState)
    return RequestInfo(api_key, api_version, correlation_id, max(0, reader.int32()))


def _response_body(frame: bytes | bytearray, api_key: int, api_version: int) -> _Reader:
    """A reader past the response header (``ResponseHeader.json``): v1 has tagged fields, ApiVersions never."""
    reader = _Reader(frame)
    reader.int32()  # CorrelationId
    if api_key != API_VERSIONS and is_flexible(api_key, api_version):
        reader.tagged_fields()
    return reader


def fetch_response_is_empty(frame: bytes | bytearray, api_version: int) -> bool:
    """True when a Fetch response (``FetchResponse.json``) has no error and no partition carries records.

    Only such an answer is held: one with records or with an error (a client must see
    an error at once, for example FETCH_SESSION_ID_NOT_FOUND) passes straight through.
    An incremental fetch's answer with no partitions at all is empty too.
    """
    flexible = is_flexible(FETCH, api_version)
    reader = _response_body(frame, FETCH, api_version)
    if api_version >= 1:
        reader.int32()  # ThrottleTimeMs
    if api_version >= 7:
        if reader.int16() != 0:  # ErrorCode
            return False
        reader.int32()  # SessionId
    for _ in range(reader.array_length(flexible)):
        if api_version >= 13:
            reader.take(16)  # TopicId (uuid)
        else:
            reader.string(flexible)  # Topic
        for _ in range(reader.array_length(flexible)):
            if not _partition_is_empty(reader, api_version, flexible):
                return False
        if flexible:
            reader.tagged_fields()
    return True


def _partition_is_empty(reader: _Reader, api_version: int, flexible: bool) -> bool:
    """Read one partition of a Fetch response; True when it has no error and no records (the reader is then past it)."""
    reader.int32()  # PartitionIndex
    if reader.int16() != 0:  # ErrorCode
        return False
    reader.take(8)  # HighWatermark
    if api_version >= 4:
        reader.take(8)  # LastStableOffset
    if api_version >= 5:
        reader.take(8)  # LogStartOffset
    if api_version >= 4:
        for _ in range(reader.array_length(flexible)):  # AbortedTransactions (nullable)
            reader.take(16)  # ProducerId, FirstOffset
            if flexible:
                reader.tagged_fields()
    if api_version >= 11:
        reader.int32()  # PreferredReadReplica
    size = reader.uvarint() - 1 if flexible else reader.int32()  # RecordSet (nullable)
    if size > 0:
        return False
    if flexible:
        reader.tagged_fields()
    return True


def _swap_port(frame: bytearray, reader: _Reader, old: int, new: int) -> int:
    """Read an int32 port; when it is ``old``, overwrite it with ``new`` in ``frame``. Count of rewrites."""
    at = reader.pos
    if reader.int32() == old:
        struct.pack_into(">i", frame, at, new)
        return 1
    return 0


def rewrite_broker_ports(frame: bytearray, api_key: int, api_version: int, old: int, new: int) -> int:
    """Rewrite, in place, every broker port ``old`` in a Metadata, FindCoordinator or DescribeCluster response.

    Returns how many ports were rewritten. The port is an int32, so no length changes.
    Layouts: ``MetadataResponse.json`` (Brokers: NodeId, Host, Port, Rack v1+),
    ``FindCoordinatorResponse.json`` (v0-3: one NodeId, Host, Port; v4+: Coordinators with
    Key, NodeId, Host, Port, ErrorCode, ErrorMessage), ``DescribeClusterResponse.json``
    (Brokers: BrokerId, Host, Port, Rack, IsFenced v2+).
    """
    flexible = is_flexible(api_key, api_version)
    reader = _response_body(frame, api_key, api_version)
    if api_key == METADATA:
        return _metadata_ports(frame, reader, api_version, flexible, (old, new))
    if api_key == FIND_COORDINATOR:
        return _coordinator_ports(frame, reader, api_version, flexible, (old, new))
    if api_key == DESCRIBE_CLUSTER:
        return _cluster_ports(frame, reader, api_version, flexible, (old, new))
    return 0


def _metadata_ports(frame: bytearray, reader: _Reader, api_version: int, flexible: bool, ports: tuple[int, int]) -> int:
    """A Metadata response's Brokers: NodeId, Host, Port, Rack (v1+)."""
    done = 0
    if api_version >= 3:
        reader.int32()  # ThrottleTimeMs
    for _ in range(reader.array_length(flexible)):
        reader.int32()  # NodeId
        reader.string(flexible)  # Host
        done += _swap_port(frame, reader, *ports)
        if api_version >= 1:
            reader.string(flexible)  # Rack
        if flexible:
            reader.tagged_fields()
    return done


def _coordinator_ports(
    frame: bytearray, reader: _Reader, api_version: int, flexible: bool, ports: tuple[int, int]
) -> int:
    """A FindCoordinator response: v0-3 one NodeId, Host, Port; v4+ Coordinators with Key, NodeId, Host, Port, …."""
    if api_version >= 1:
        reader.int32()  # ThrottleTimeMs
    if api_version <= 3:
        reader.int16()  # ErrorCode
        if api_version >= 1:
            reader.string(flexible)  # ErrorMessage
        reader.int32()  # NodeId
        reader.string(flexible)  # Host
        return _swap_port(frame, reader, *ports)
    done = 0
    for _ in range(reader.array_length(flexible)):
        reader.string(flexible)  # Key
        reader.int32()  # NodeId
        reader.string(flexible)  # Host
        done += _swap_port(frame, reader, *ports)
        reader.int16()  # ErrorCode
        reader.string(flexible)  # ErrorMessage
        reader.tagged_fields()
    return done


def _cluster_ports(frame: bytearray, reader: _Reader, api_version: int, flexible: bool, ports: tuple[int, int]) -> int:
    """A DescribeCluster response's Brokers: BrokerId, Host, Port, Rack, IsFenced (v2+)."""
    reader.int32()  # ThrottleTimeMs
    reader.int16()  # ErrorCode
    reader.string(flexible)  # ErrorMessage
    if api_version >= 1:
        reader.int8()  # EndpointType
    reader.string(flexible)  # ClusterId
    reader.int32()  # ControllerId
    done = 0
    for _ in range(reader.array_length(flexible)):
        reader.int32()  # BrokerId
        reader.string(flexible)  # Host
        done += _swap_port(frame, reader, *ports)
        reader.string(flexible)  # Rack
        if api_version >= 2:
            reader.int8()  # IsFenced
        reader.tagged_fields()
    return done


class FetchShim:
    """The asyncio server: one upstream connection to noida-db per client connection."""

    def __init__(self, port: int, upstream_port: int, host: str = "127.0.0.1", hold_cap_ms: int = HOLD_CAP_MS) -> None:
        self.host = host
        self.port = port
        self.upstream_port = upstream_port
        self.hold_cap_s = hold_cap_ms / 1000
        #: Counters, for tests and benchmarks (``fetches``: Fetch requests seen; ``held``: answers held).
        self.stats = {"fetches": 0, "held": 0, "woken": 0, "rewritten": 0, "connections": 0, "unparsed": 0}
        #: Writes acknowledged so far (see WAKING_APIS), and the event that wakes the Fetch answers held now.
        self.writes = 0
        self._written = asyncio.Event()
        #: Each (api key, version) clients used, so one can check what they negotiate with noida-db.
        self.versions: set[tuple[int, int]] = set()
        self.log_versions = False
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(self.host, self.upstream_port)
        except OSError:
            client_writer.close()
            return
        pending: deque[tuple[RequestInfo | None, float, int]] = deque()
        tasks = [
            asyncio.create_task(self._requests(client_reader, upstream_writer, pending)),
            asyncio.create_task(self._responses(upstream_reader, client_writer, pending)),
        ]
        with contextlib.suppress(Exception):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for writer in (client_writer, upstream_writer):
            with contextlib.suppress(Exception):
                writer.close()

    async def _requests(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        pending: deque[tuple[RequestInfo | None, float, int]],
    ) -> None:
        """Client to noida-db: note each request's header (and a Fetch's wait), forward it unchanged."""
        while True:
            prefix = await source.readexactly(4)
            size = struct.unpack(">i", prefix)[0]
            frame = await source.readexactly(size)
            try:
                info: RequestInfo | None = parse_request(frame)
            except FrameError:
                info = None
            if info is not None:
                self.stats["fetches"] += info.api_key == FETCH
                if (info.api_key, info.api_version) not in self.versions:
                    self.versions.add((info.api_key, info.api_version))
                    if self.log_versions:
                        print(
                            f"fetch_shim: api {info.api_key} v{info.api_version} {self.stats}",
                            file=sys.stderr,
                            flush=True,
                        )
            pending.append((info, time.monotonic(), self.writes))
            sink.write(prefix)
            sink.write(frame)
            await sink.drain()

    def _wake(self) -> None:
        """A write was acknowledged: let every held Fetch answer go now."""
        self.writes += 1
        self._written.set()
        self._written = asyncio.Event()

    async def _responses(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        pending: deque[tuple[RequestInfo | None, float, int]],
    ) -> None:
        """noida-db to client, in order: hold empty Fetch answers, rewrite broker ports, stream big answers."""
        while True:
            prefix = await source.readexactly(8)
            size, correlation_id = struct.unpack(">ii", prefix)
            info, arrived, writes_before = None, 0.0, 0
            # A request with no answer (a Produce with acks=0) is skipped by its correlation id.
            while pending:
                info, arrived, writes_before = pending.popleft()
                if info is None or info.correlation_id == correlation_id:
                    break
            if info is not None and info.api_key in WAKING_APIS:
                self._wake()
            if size > INSPECT_LIMIT or info is None or info.api_version not in SUPPORTED_VERSIONS.get(info.api_key, ()):
                sink.write(prefix)
                left = size - 4
                while left:
                    chunk = await source.read(min(left, _CHUNK))
                    if not chunk:
                        raise asyncio.IncompleteReadError(b"", left)
                    left -= len(chunk)
                    sink.write(chunk)
                    await sink.drain()
                continue
            frame = bytearray(prefix[4:] + await source.readexactly(size - 4))
            try:
                if info.api_key == FETCH:
                    # A write acknowledged since the request left may have been missed by noida-db's answer.
                    if self.writes == writes_before and fetch_response_is_empty(frame, info.api_version):
                        delay = arrived + min(info.max_wait_ms / 1000, self.hold_cap_s) - time.monotonic()
                        if delay > 0:
                            self.stats["held"] += 1
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(self._written.wait(), delay)
                                self.stats["woken"] += 1
                else:
                    self.stats["rewritten"] += rewrite_broker_ports(
                        frame, info.api_key, info.api_version, self.upstream_port, self.port
                    )
            except FrameError:
                self.stats["unparsed"] += 1  # a layout this shim does not know: pass it on as it came
            sink.write(prefix[:4])
            sink.write(frame)
            await sink.drain()


def _die_with_parent() -> None:
    """Make noida-db receive SIGTERM when the shim dies, however it dies (``prctl(PR_SET_PDEATHSIG)``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


async def _run(args: argparse.Namespace) -> int:
    shim = FetchShim(args.port, args.upstream_port, hold_cap_ms=args.hold_cap_ms)
    shim.log_versions = args.log_versions
    await shim.start()
    broker = subprocess.Popen(args.command, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    while not stopping.is_set() and broker.poll() is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=0.5)
    if broker.poll() is None:
        broker.terminate()
        try:
            await asyncio.to_thread(broker.wait, 10)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()
    return 0 if stopping.is_set() else (broker.returncode or 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True, help="where clients connect (127.0.0.1)")
    parser.add_argument("--upstream-port", type=int, required=True, help="noida-db's own Kafka port")
    parser.add_argument("--hold-cap-ms", type=int, default=int(os.environ.get("KERR_FETCH_HOLD_MS", HOLD_CAP_MS)))
    parser.add_argument("--log-versions", action="store_true", help="print each API version clients use")
    parser.add_argument("command", nargs="+", help="the broker command line, after --")
    args = parser.parse_args(argv)
    return asyncio.run(_run(args))


if __name__ == "__main__":
    sys.exit(main())

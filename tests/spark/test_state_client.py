"""Pipelined `MapState` calls (`kstream.spark.state_client`) against a state server that, like
Spark's, reads one request at a time from its socket and answers it before reading the next.

The server here is a thread speaking the same framing and messages over loopback TCP with
small socket buffers, so that writing every request before reading any answer would block
both sides; the real server is exercised by every Spark task-path test.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.proto import StateMessage_pb2 as m

from kstream.spark.state_client import SparkMap, StateServerError, exchange

SMALL = 4096


class MapServer:
    """A one-connection map-state server; `fail_on` makes it refuse a key and hang up, as
    Spark's server does after an error."""

    def __init__(self, fail_on: bytes | None = None) -> None:
        self.data: dict[bytes, bytes] = {}
        self.requests = 0
        self.fail_on = fail_on
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.client = socket.socket()
        self.client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL)
        self.client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL)
        self.client.connect(listener.getsockname())
        self.conn, _ = listener.accept()
        listener.close()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _read(self, f: Any, n: int) -> bytes:
        got = f.read(n)
        if len(got) < n:
            raise EOFError
        return bytes(got)

    def _serve(self) -> None:
        f = self.conn.makefile("rwb")
        try:
            while True:
                version, size = struct.unpack(">ii", self._read(f, 8))
                assert version == 0
                request = m.StateRequest()
                request.ParseFromString(self._read(f, size))
                self.requests += 1
                call = request.stateVariableRequest.mapStateCall
                answer = m.StateResponse(statusCode=0)
                which = call.WhichOneof("method")
                if which == "getValue":
                    key = pickle.loads(call.getValue.userKey)[0]
                    if key == self.fail_on:
                        answer = m.StateResponse(statusCode=1, errorMessage=f"no {key!r}")
                    elif key in self.data:
                        answer.value = self.data[key]
                elif which == "updateValue":
                    self.data[pickle.loads(call.updateValue.userKey)[0]] = call.updateValue.value
                elif which == "removeKey":
                    self.data.pop(pickle.loads(call.removeKey.userKey)[0], None)
                raw = answer.SerializeToString()
                f.write(struct.pack(">i", len(raw)) + raw)
                f.flush()
                if answer.statusCode != 0:
                    return
        except EOFError:
            return
        finally:
            f.close()
            self.conn.close()

    def close(self) -> None:
        self.client.close()
        self.thread.join(5)


class _Client:
    def __init__(self, sock: socket.socket) -> None:
        self._client_socket = sock


class _MapState:
    """What `SparkMap` reads of pyspark's `MapState`: its name and its client's socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._stateName = "store.s"
        self._mapStateClient = type("C", (), {})()
        self._mapStateClient._stateful_processor_api_client = _Client(sock)


@pytest.fixture
def server() -> Iterator[MapServer]:
    s = MapServer()
    yield s
    s.close()


def test_many_large_requests_and_answers_pass_small_buffers(server: MapServer) -> None:
    spark_map = SparkMap(_MapState(server.client))
    value = b"v" * 3000
    ops: list[tuple[bytes, bytes | None]] = [(b"k%d" % i, value + b"%d" % i) for i in range(6000)]
    ops += [(b"k%d" % i, None) for i in range(0, 6000, 3)]  # removes, after the puts, in order
    spark_map.write_many(ops)
    keys = [b"k%d" % i for i in range(6000)] + [b"absent"]
    got = spark_map.get_many(keys)
    expected = [None if i % 3 == 0 else value + b"%d" % i for i in range(6000)] + [None]
    assert got == expected
    assert server.requests == 6000 + 2000 + 6001
    assert server.client.gettimeout() is None  # blocking again, as pyspark's client expects
    assert spark_map.get(b"k1") == value + b"1"
    spark_map.put(b"k1", b"x")
    spark_map.remove(b"k2")
    assert spark_map.get_many([b"k1", b"k2"]) == [b"x", None]


def test_a_worker_holding_over_1024_files_still_exchanges() -> None:
    """A Python worker Spark reuses keeps Kafka clients (their sockets and pipes) from query to
    query; the oracle lane's workers came to hold more than 1,024 files, and select() refuses
    a descriptor past that: the state socket's batch failed. The exchange waits with poll."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        server = MapServer()
        try:
            assert server.client.fileno() >= 1024
            spark_map = SparkMap(_MapState(server.client))
            spark_map.write_many([(b"k%d" % i, b"v%d" % i) for i in range(200)])
            assert spark_map.get_many([b"k0", b"k199", b"absent"]) == [b"v0", b"v199", None]
        finally:
            server.close()
    finally:
        for fd in held:
            os.close(fd)


def test_a_refused_request_raises_and_a_closed_server_does_not_hang() -> None:
    server = MapServer(fail_on=b"bad")
    try:
        spark_map = SparkMap(_MapState(server.client))
        with pytest.raises(StateServerError, match=r"get failed: no b'bad'"):
            spark_map.get_many([b"a", b"bad", b"c", b"d"])
    finally:
        server.close()


def test_exchange_answers_in_request_order(server: MapServer) -> None:
    requests = []
    for i in range(50):
        call = m.MapStateCall(
            stateName="s",
            updateValue=m.UpdateValue(
                userKey=pickle.dumps((b"%d" % i,)), value=pickle.dumps((b"%d" % i,))
            ),
        )
        requests.append(
            m.StateRequest(stateVariableRequest=m.StateVariableRequest(mapStateCall=call))
        )
    for i in range(50):
        call = m.MapStateCall(
            stateName="s", getValue=m.GetValue(userKey=pickle.dumps((b"%d" % i,)))
        )
        requests.append(
            m.StateRequest(stateVariableRequest=m.StateVariableRequest(mapStateCall=call))
        )
    answers = exchange(server.client, [r.SerializeToString() for r in requests])
    values = []
    for raw in answers[50:]:
        a = m.StateResponse()
        a.ParseFromString(raw)
        values.append(pickle.loads(a.value)[0])
    assert values == [b"%d" % i for i in range(50)]

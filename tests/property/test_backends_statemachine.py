"""Each backend against a sorted-dict model, driven by hypothesis' stateful testing.

Keys come from a tiny alphabet including 0x00 and 0xFF so that prefixes, shared prefixes and
the edges of byte order are hit constantly. Besides short keys (the empty key included) they
include long ones: a shared 509-byte stem plus a short tail straddles LMDB's 511-byte key
limit, and a 4 KiB stem stands for long URLs with window suffixes; range bounds are drawn the
same way.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from support.redis_server import RedisServer, available

import store_backends
from store_backends import Backend


def _alphabet(b: bytes) -> bytes:
    return bytes(x % 4 * 85 for x in b)


STEMS = (b"\x55" * 509, b"\x55" * 509 + b"\xaa" * 3587)
short_keys = st.binary(min_size=0, max_size=4).map(_alphabet)
long_keys = st.builds(
    lambda stem, tail: stem + tail, st.sampled_from(STEMS), st.binary(max_size=6).map(_alphabet)
)
keys = st.one_of(short_keys, long_keys)
bounds = st.one_of(st.none(), st.binary(min_size=0, max_size=3).map(_alphabet), long_keys)
values = st.binary(max_size=6)
checkpoints = st.one_of(st.none(), st.fixed_dictionaries({"offset": st.integers(0, 10**12)}))


class BackendMachine(RuleBasedStateMachine):
    url: ClassVar[str] = "memory://"
    reopenable: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="kstream-sm-")
        self.ns = uuid.uuid4().hex[:8]
        self.model: dict[bytes, bytes] = {}
        self.cp: dict[str, Any] = {}
        self.be: Backend = self._open()

    def _open(self) -> Backend:
        return store_backends.open(
            self.url, name="sm", partition=0, state_dir=self.dir, namespace=self.ns
        )

    def teardown(self) -> None:
        self.be.destroy()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def start_empty(self) -> None:
        assert self.be.checkpoint() == {}

    @rule(k=keys, v=values)
    def put(self, k: bytes, v: bytes) -> None:
        self.be.put(k, v)
        self.model[k] = v

    @rule(k=keys)
    def delete(self, k: bytes) -> None:
        self.be.delete(k)
        self.model.pop(k, None)

    @rule(
        puts=st.dictionaries(keys, values, max_size=6),
        dels=st.lists(keys, max_size=4),
        cp=checkpoints,
    )
    def write_batch(
        self, puts: dict[bytes, bytes], dels: list[bytes], cp: dict[str, Any] | None
    ) -> None:
        self.be.write_batch(puts, dels, cp)
        for k in dels:
            self.model.pop(k, None)
        self.model.update(puts)
        if cp is not None:
            self.cp = cp

    @rule(puts=st.dictionaries(keys, values, min_size=1, max_size=4), cp=checkpoints)
    def failing_batch_changes_nothing(
        self, puts: dict[bytes, bytes], cp: dict[str, Any] | None
    ) -> None:
        bad: dict[bytes, Any] = {**puts, b"\x55bad": 12345}
        with pytest.raises(TypeError):
            self.be.write_batch(bad, list(self.model)[:2], cp)

    @rule(k=keys)
    def get(self, k: bytes) -> None:
        assert self.be.get(k) == self.model.get(k)

    @rule(lo=bounds, hi=bounds, reverse=st.booleans())
    def range(self, lo: bytes | None, hi: bytes | None, reverse: bool) -> None:
        expect = sorted(
            (k, v)
            for k, v in self.model.items()
            if (lo is None or k >= lo) and (hi is None or k <= hi)
        )
        if reverse:
            expect.reverse()
        with self.be.range(lo, hi, reverse) as cur:
            got = list(cur)
        assert got == expect

    @rule(prefix=bounds.filter(lambda b: b is not None))
    def prefix_scan(self, prefix: bytes) -> None:
        expect = sorted((k, v) for k, v in self.model.items() if k.startswith(prefix))
        with self.be.prefix_scan(prefix) as cur:
            assert list(cur) == expect

    @precondition(lambda self: self.reopenable)
    @rule()
    def close_and_reopen(self) -> None:
        self.be.close()
        self.be = self._open()

    @invariant()
    def checkpoint_round_trips(self) -> None:
        assert self.be.checkpoint() == self.cp

    @invariant()
    def counts(self) -> None:
        assert self.be.approximate_num_entries() == len(self.model)


FAST = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SLOW = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class MemoryMachine(BackendMachine):
    url = "memory://"


class LRUMachine(BackendMachine):
    # A bound above the alphabet's key count: eviction is tested in the unit tests.
    url = "lru://?max_entries=100000"


class LMDBMachine(BackendMachine):
    url = "lmdb"
    reopenable = True


TestMemoryBackend = MemoryMachine.TestCase
TestMemoryBackend.settings = FAST
TestLRUBackend = LRUMachine.TestCase
TestLRUBackend.settings = FAST
TestLMDBBackend = LMDBMachine.TestCase
TestLMDBBackend.settings = SLOW


@pytest.fixture(scope="module")
def redis_server() -> Any:
    if not available():
        pytest.skip("redis-server is not installed")
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.mark.redis
def test_redis_backend_matches_model(redis_server: RedisServer) -> None:
    class RedisMachine(BackendMachine):
        url = redis_server.url
        reopenable = True

    case = RedisMachine.TestCase
    case.settings = SLOW
    case("runTest").runTest()

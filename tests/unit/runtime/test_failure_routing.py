"""The failure table (runtime/failures.py): which error of a task step gets which recovery."""

from __future__ import annotations

import pytest

from kstream.errors import (
    BrokerUnreachableError,
    ChangelogRecordError,
    CoPartitioningError,
    DeserializationError,
    KafkaClientError,
    ProcessingError,
    ProduceError,
    ProducerFencedError,
    StoreCorruptedError,
    StoreError,
    StoreLostError,
    TopologyError,
)
from kstream.kafka.errors import FatalTransactionError, TransactionAbortableError
from kstream.runtime.failures import FAILURE_TABLE, Recovery, route


class Producer:
    def __init__(self, fatal: bool = False, fenced: bool = False) -> None:
        self._fatal, self._fenced = fatal, fenced

    def is_fatal(self) -> bool:
        return self._fatal

    def fenced(self) -> bool:
        return self._fenced


@pytest.mark.parametrize(
    ("error", "recovery"),
    [
        (StoreLostError("gone"), Recovery.REBUILD),
        (StoreError("broken"), Recovery.STOP),
        (StoreCorruptedError("bad"), Recovery.STOP),
        (ChangelogRecordError("bad", topic="t", partition=0, offset=1), Recovery.STOP),
        (DeserializationError("bad bytes"), Recovery.STOP),
        (ProcessingError("user code"), Recovery.STOP),
        (TopologyError("bad"), Recovery.STOP),
        (CoPartitioningError("bad"), Recovery.STOP),
        (TypeError("bug"), Recovery.STOP),
        (AttributeError("bug"), Recovery.STOP),
        (NameError("bug"), Recovery.STOP),
        (ValueError("unlisted"), Recovery.STOP),
        (RuntimeError("unlisted"), Recovery.STOP),
        (ProducerFencedError("fenced"), Recovery.REJOIN),
        (FatalTransactionError("fatal"), Recovery.RECREATE_PRODUCER),
        (TransactionAbortableError("abortable"), Recovery.RETRY),
        (KafkaClientError("timeout"), Recovery.RETRY),
        (BrokerUnreachableError("away"), Recovery.RETRY),
        (ProduceError("failed"), Recovery.RETRY),
    ],
)
def test_each_error_has_its_recovery(error: BaseException, recovery: Recovery) -> None:
    assert route(error) is recovery
    # a healthy transactional producer changes nothing
    assert route(error, Producer()) is recovery


def test_a_client_error_that_left_the_producer_fatal_follows_the_producer() -> None:
    error = KafkaClientError("commit failed")
    assert route(error, Producer(fatal=True, fenced=True)) is Recovery.REJOIN
    assert route(error, Producer(fatal=True)) is Recovery.RECREATE_PRODUCER


def test_the_producer_state_does_not_override_other_rows() -> None:
    fatal = Producer(fatal=True)
    assert route(FatalTransactionError("x"), Producer(fatal=True, fenced=True)) is (
        Recovery.RECREATE_PRODUCER
    )
    assert route(StoreLostError("x"), fatal) is Recovery.REBUILD
    assert route(ProcessingError("x"), fatal) is Recovery.STOP


def test_no_row_is_shadowed_by_an_earlier_one() -> None:
    """First match wins: a row below a row for its base class would never be reached."""
    for i, (kind, _) in enumerate(FAILURE_TABLE):
        for earlier, _ in FAILURE_TABLE[:i]:
            assert not issubclass(kind, earlier), f"{kind.__name__} is shadowed by {earlier}"

"""A record's failure on a Spark worker, raised on the driver as kstream's own error.

Spark tells the driver about a worker's exception as text: the worker's Python traceback inside
a `StreamingQueryException` (FOREACH_BATCH_USER_FUNCTION_ERROR), between Java frames. A
kstream error leaving a worker function (`in_worker`) therefore gets a note (PEP 678: printed
with the traceback, leaving the error's own message alone) holding its kind, text and, for a
`RecordError`, its record as one JSON line; the driver finds that note in the query's failure
(`raise_failure`) and raises the same error in place of Spark's wrapper: a
`DeserializationError` / `ProcessingError` naming topic, partition and offset, or any other
of kstream's errors a task raised (a suppress buffer's `BufferFullError`, a topic chooser's
`TopicError` for a missing topic, ...), as its own class with its message: what the native
engine's `App.error` holds, and the one line `kstreamd run` prints.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from kstream.errors import DeserializationError, KStreamError, ProcessingError, RecordError

log = logging.getLogger("kstream.spark")

NOTE = "kstream-record-error: "
_NOTE_LINE = re.compile(r"kstream-record-error: (\{.*\})\s*$", re.MULTILINE)
_KINDS: dict[str, type[RecordError]] = {
    c.__name__: c for c in (DeserializationError, ProcessingError, RecordError)
}


@contextmanager
def in_worker() -> Iterator[None]:
    """Around a worker function's body: a kstream error leaving it carries its note."""
    try:
        yield
    except KStreamError as e:
        add_note(e)
        raise


def add_note(err: KStreamError) -> None:
    """Attach `err`'s note (once)."""
    if any(n.startswith(NOTE) for n in getattr(err, "__notes__", ())):
        return
    payload: dict[str, Any] = {
        "kind": type(err).__name__,
        "module": type(err).__module__,
        "text": str(err),
    }
    if isinstance(err, RecordError):
        payload.update(topic=err.topic, partition=err.partition, offset=err.offset)
    else:  # the error's own plain attributes (a Kafka error's code), as far as JSON holds them
        payload["attrs"] = {
            k: v
            for k, v in vars(err).items()
            if not k.startswith("_") and (v is None or isinstance(v, str | int | float | bool))
        }
    err.add_note(NOTE + json.dumps(payload))


def record_error(failure: BaseException) -> KStreamError | None:
    """The kstream error a worker's note in `failure`'s text describes, or None."""
    for m in _NOTE_LINE.finditer(str(failure)):
        try:
            data = json.loads(m.group(1))
            err = _rebuilt(data)
        except (ValueError, KeyError, TypeError):
            continue
        if err is not None:
            return err
    return None


def _rebuilt(data: dict[str, Any]) -> KStreamError | None:
    """The error a note describes: a record error of its kind, or kstream's error class the
    note names (None if that class is not one of kstream's errors)."""
    kind = str(data["kind"])
    if "topic" in data or kind in _KINDS:
        rec = _KINDS.get(kind, RecordError)
        err: KStreamError = rec.__new__(rec)
        KStreamError.__init__(err, str(data["text"]))
        err.topic = data["topic"]  # type: ignore[attr-defined]
        err.partition = data["partition"]  # type: ignore[attr-defined]
        err.offset = data["offset"]  # type: ignore[attr-defined]
        return err
    module = str(data.get("module", ""))
    if not module.startswith("kstream."):
        return None
    try:
        cls = getattr(importlib.import_module(module), kind)
    except (ImportError, AttributeError):
        return None
    if not (isinstance(cls, type) and issubclass(cls, KStreamError)):
        return None
    err = cls.__new__(cls)
    KStreamError.__init__(err, str(data["text"]))
    for k, v in dict(data.get("attrs") or {}).items():
        setattr(err, k, v)
    return err


def raise_failure(failure: BaseException) -> NoReturn:
    """Raise a query's `failure`: as kstream's own error when a record caused it."""
    err = record_error(failure)
    if err is None:
        raise failure
    log.debug("the query failed on a record; Spark reports: %s", failure)
    raise err from None

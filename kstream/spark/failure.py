"""A record's failure on a Spark worker, raised on the driver as kstream's own error.

Spark tells the driver about a worker's exception as text: the worker's Python traceback inside
a `StreamingQueryException` (FOREACH_BATCH_USER_FUNCTION_ERROR), between Java frames. A
`RecordError` leaving a worker function (`in_worker`) therefore gets a note (PEP 678: printed
with the traceback, leaving the error's own message alone) holding its kind, text and record
as one JSON line; the driver finds that note in the query's failure (`raise_failure`) and
raises the same `DeserializationError` / `ProcessingError`, naming topic, partition and
offset, in place of Spark's wrapper: what the native engine's `App.error` holds, and the one
line `kstreamd run` prints.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from kstream.errors import DeserializationError, KStreamError, ProcessingError, RecordError

log = logging.getLogger("kstream.spark")

NOTE = "kstream-record-error: "
_NOTE_LINE = re.compile(r"kstream-record-error: (\{.*\})\s*$", re.MULTILINE)
_KINDS: dict[str, type[RecordError]] = {
    c.__name__: c for c in (DeserializationError, ProcessingError, RecordError)
}


@contextmanager
def in_worker() -> Iterator[None]:
    """Around a worker function's body: a `RecordError` leaving it carries its note."""
    try:
        yield
    except RecordError as e:
        add_note(e)
        raise


def add_note(err: RecordError) -> None:
    """Attach `err`'s note (once)."""
    if any(n.startswith(NOTE) for n in getattr(err, "__notes__", ())):
        return
    payload = {
        "kind": type(err).__name__,
        "text": str(err),
        "topic": err.topic,
        "partition": err.partition,
        "offset": err.offset,
    }
    err.add_note(NOTE + json.dumps(payload))


def record_error(failure: BaseException) -> RecordError | None:
    """The kstream error a worker's note in `failure`'s text describes, or None."""
    for m in _NOTE_LINE.finditer(str(failure)):
        try:
            data = json.loads(m.group(1))
            kind = _KINDS.get(str(data["kind"]), RecordError)
            err = kind.__new__(kind)
            KStreamError.__init__(err, str(data["text"]))
            err.topic = data["topic"]
            err.partition = data["partition"]
            err.offset = data["offset"]
        except (ValueError, KeyError, TypeError):
            continue
        return err
    return None


def raise_failure(failure: BaseException) -> NoReturn:
    """Raise a query's `failure`: as kstream's own error when a record caused it."""
    err = record_error(failure)
    if err is None:
        raise failure
    log.debug("the query failed on a record; Spark reports: %s", failure)
    raise err from None

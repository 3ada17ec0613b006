"""Logging for every `kstreamd` subcommand: level and format from flags or the environment.

`--log-level` (or `KSTREAM_LOG_LEVEL`) takes a Python level name; `--log-format json` (or
`KSTREAM_LOG_FORMAT=json`) writes one JSON object per line, which log shippers (Loki, Elastic,
Cloud Logging) parse without a grok pattern. Flags win over the environment, the environment
over the defaults (INFO, text). A bad value is a configuration error (exit 2) naming its source.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

import orjson

from kstream.errors import ConfigError

__all__ = [
    "LOG_FORMATS",
    "JsonFormatter",
    "add_logging_flags",
    "configured_logging",
    "setup_logging",
]

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVEL_ENV = "KSTREAM_LOG_LEVEL"
FORMAT_ENV = "KSTREAM_LOG_FORMAT"

# attributes every LogRecord has; anything else was passed through `extra=` and is kept
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the
    exception if any, and the record's `extra=` fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        return orjson.dumps(out, default=str).decode()


def add_logging_flags(parser: argparse.ArgumentParser) -> None:
    """Add `--log-level` and `--log-format` to a (sub)command's parser."""
    parser.add_argument(
        "--log-level",
        default=None,
        help=f"Python logging level, e.g. DEBUG or WARNING (default ${LEVEL_ENV} or INFO)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=None,
        help=f"text, or json: one object per line (default ${FORMAT_ENV} or text)",
    )


def setup_logging(
    level: str | None = None,
    fmt: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
    only_if_asked: bool = False,
) -> logging.Handler | None:
    """Configure the root logger from flags, else the environment, else INFO and text.

    Replaces the root logger's handlers (so a second call reconfigures instead of doubling
    every line) and returns the handler installed. With `only_if_asked` (the one-shot tools:
    describe, reset, demo, ...) nothing changes unless a flag or variable asks for a level or
    format, so their errors stay the one line they print themselves.
    """
    env = os.environ if environ is None else environ
    if only_if_asked and not (level or fmt or env.get(LEVEL_ENV) or env.get(FORMAT_ENV)):
        return None
    level_name, level_from = (level, "--log-level") if level else (env.get(LEVEL_ENV), LEVEL_ENV)
    numeric = logging.INFO
    if level_name:
        value = logging.getLevelName(level_name.strip().upper())
        if not isinstance(value, int):
            raise ConfigError(
                f"{level_from}: unknown level {level_name!r}; expected one of "
                "DEBUG, INFO, WARNING, ERROR, CRITICAL"
            )
        numeric = value
    fmt_name, fmt_from = (fmt, "--log-format") if fmt else (env.get(FORMAT_ENV), FORMAT_ENV)
    fmt_name = (fmt_name or "text").strip().lower()
    if fmt_name not in LOG_FORMATS:
        raise ConfigError(f"{fmt_from}: unknown format {fmt_name!r}; expected text or json")
    handler: logging.Handler = (
        _CurrentStderrHandler() if stream is None else logging.StreamHandler(stream)
    )
    handler.setFormatter(JsonFormatter() if fmt_name == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    return handler


@contextlib.contextmanager
def configured_logging(
    level: str | None = None, fmt: str | None = None, *, only_if_asked: bool = False
) -> Iterator[logging.Handler | None]:
    """`setup_logging` for the length of a command; the root logger's previous handlers and
    level come back afterwards, so `kstreamd`'s `main()` can be called more than once in one
    process (tests, embedding) without its handler lingering."""
    root = logging.getLogger()
    handlers, previous_level = list(root.handlers), root.level
    handler = setup_logging(level, fmt, only_if_asked=only_if_asked)
    try:
        yield handler
    finally:
        if handler is not None:
            root.removeHandler(handler)
            for old in handlers:
                if old not in root.handlers:
                    root.addHandler(old)
            root.setLevel(previous_level)


class _CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """Writes to whatever `sys.stderr` is when a record is emitted (as logging's own last-resort
    handler does), not the stream of the moment the handler was made."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass

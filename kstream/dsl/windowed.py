"""Windowed streams: `KGroupedStream.windowed_by(windows)` gives a `TimeWindowedKStream` or a
`SessionWindowedKStream`, and the windowed key serdes of their results.

The classes are defined in `kstream.dsl.api` beside `KTable`, which they are bound to; their
operators, the serdes and how windows close are in `kstream.dsl.windowed_ops`. This module
keeps the import paths `kstream.dsl.windowed.<name>`.
"""

from kstream.dsl.api import SessionWindowedKStream, TimeWindowedKStream
from kstream.dsl.windowed_ops import session_windowed_serde, time_windowed_serde

__all__ = [
    "SessionWindowedKStream",
    "TimeWindowedKStream",
    "session_windowed_serde",
    "time_windowed_serde",
]

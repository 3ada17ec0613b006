"""`KGroupedStream.cogroup`: several grouped streams folded into one aggregate per key (KIP-150).

The classes are defined in `kstream.dsl.api` beside `KTable`, which they are bound to; their
operators and the topology they build are described in `kstream.dsl.cogroup_ops`. This module
keeps the import paths `kstream.dsl.cogroup.<name>`.
"""

from kstream.dsl.api import (
    CogroupedKStream,
    SessionWindowedCogroupedKStream,
    TimeWindowedCogroupedKStream,
)

__all__ = [
    "CogroupedKStream",
    "SessionWindowedCogroupedKStream",
    "TimeWindowedCogroupedKStream",
]

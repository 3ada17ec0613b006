"""`KGroupedStream`: a stream grouped by key, ready for count / reduce / aggregate.

The class is defined in `kstream.dsl.api` beside `KStream` and `KTable`, which it is bound to
(its operators are `kstream.dsl.grouped_ops.GroupedStreamOps`); this module keeps the import
path `kstream.dsl.grouped.KGroupedStream`.
"""

from kstream.dsl.api import KGroupedStream

__all__ = ["KGroupedStream"]

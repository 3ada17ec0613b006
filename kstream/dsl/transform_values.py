"""`KTable.transform_values`: a user transformer with state stores on a table (Kafka's
`transformValues` with a `ValueTransformerWithKey`).

The transformer is an object made once per task by the factory given: `init(ctx)` (optional;
stores through `ctx.get_store(name)`), `transform(key, value) -> new value` and `close()`
(optional). As Kafka's `KTableTransformValues`, `transform` also sees None values (a delete
or an absent key) and its result is the table's new value (None deletes); it is called for
the old value too while a consumer below needs old values (a filter below a materialized
table, a regroup, a join), so a transformer that keeps state sees every update twice then.
Joins read the table through a transformer of their own (`TransformedValueGetter`) unless the
result is materialized.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class ValueTransformerWithKey(Protocol):
    """What `KTable.transform_values`' factory returns (`init` and `close` are optional)."""

    def transform(self, key: Any, value: Any) -> Any: ...


TransformerFactory = Callable[[], ValueTransformerWithKey]

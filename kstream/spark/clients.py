"""The client supplier of a Spark run, carried from the driver to the executors.

`kstream.spark.run(..., client_supplier=...)` gives the source's planner and readers, the
global-table reads, the sink's producers and marker consumers and the set-up's admin client
their clients from one `ClientSupplier`, as the native runtime does. Spark's workers are other
processes, so the supplier travels pickled (`kstream.spark.wire.dumps`) in a source option or
a task plan, and is unpickled once per worker; None stands for Kafka's.
"""

from __future__ import annotations

import base64

from kstream.kafka.supplier import ClientSupplier, KafkaClientSupplier
from kstream.spark.wire import dumps, loads

__all__ = ["pack_supplier", "unpack_supplier"]

_SUPPLIERS: dict[str, ClientSupplier] = {}


def pack_supplier(supplier: ClientSupplier | None) -> str:
    """`supplier` as text for a source option ("" for Kafka's)."""
    if supplier is None:
        return ""
    return base64.b64encode(dumps(supplier)).decode("ascii")


def unpack_supplier(packed: str | None) -> ClientSupplier:
    """The supplier of `pack_supplier`'s text, unpickled once per Python worker."""
    if not packed:
        return KafkaClientSupplier()
    found = _SUPPLIERS.get(packed)
    if found is None:
        if len(_SUPPLIERS) > 16:
            _SUPPLIERS.clear()
        found = _SUPPLIERS[packed] = loads(base64.b64decode(packed))
    return found

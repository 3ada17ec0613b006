"""Payments deduplicated by their idempotency key.

Upstream services retry, so the same payment can arrive several times. Each payment (topic
`payments`, key: account id, value: JSON with an `idempotency_key`) is passed on to
`payments-deduped` only the first time its idempotency key is seen within an hour; payments
without one pass unchanged. The seen keys live in the `payment-ids` dedup store, so a restart
does not let duplicates through. Retries of one payment carry the same account key, so they
reach the same partition and the same store.

Run it with `kstreamd run examples.payments_dedup:topology`.
"""

from __future__ import annotations

from typing import Any

from kstream.dsl import StreamBuilder
from kstream.topology import Topology


def idempotency_key(_account: Any, payment: Any) -> Any:
    if not isinstance(payment, dict):
        return None
    return payment.get("idempotency_key")


def build_topology(
    input_topic: str = "payments", output_topic: str = "payments-deduped"
) -> Topology:
    builder = StreamBuilder()
    (
        builder.stream(input_topic, key_serde="string", value_serde="json")
        .deduplicate(idempotency_key, within="1h", store="payment-ids")
        .to(output_topic, key_serde="string", value_serde="json")
    )
    return builder.build()


topology = build_topology()

"""The configs of the topics kstream creates for an app, as Kafka Streams sets them.

Kafka Streams creates its internal topics with a few overrides of the broker's defaults
(`InternalTopicConfig` and its subclasses, applied by `InternalTopicManager`). kstream uses the
same ones, so the broker bounds an app's topics the same way and an operator who knows Kafka
Streams finds what they expect:

* every internal topic: `message.timestamp.type=CreateTime`, whatever the broker's default, so
  records keep the timestamps the app gave them (windows, retention and restores go by them);
* repartition topics (`RepartitionTopicConfig`): `cleanup.policy=delete`, `retention.ms=-1`
  and `segment.bytes` 50 MiB. Nothing else holds these records, so they must not expire by age
  while a task lags; the app deletes them itself once committed (`kstream.runtime.purge`,
  DeleteRecords), and the small segments let the broker free that space soon after;
* key-value changelogs (`UnwindowedUnversionedChangelogTopicConfig`): `cleanup.policy=compact`,
  since the newest value of each key is all a restore needs;
* versioned key-value changelogs (`VersionedChangelogTopicConfig`): `cleanup.policy=compact`
  with `min.compaction.lag.ms` = the history retention plus one day, so compaction keeps the
  older versions of a key a restore needs to rebuild its history;
* window, session and dedup changelogs (`WindowedChangelogTopicConfig`):
  `cleanup.policy=compact,delete` with `retention.ms` = the store's retention plus
  `windowstore_changelog_additional_retention` (Kafka Streams'
  `windowstore.changelog.additional.retention.ms`, one day). Such stores drop expired entries
  locally without writing tombstones, so compaction alone would keep them forever; the extra
  time allows for clock drift between the broker and the records' timestamps, so the broker
  does not delete entries a restore should still bring back.
"""

from __future__ import annotations

__all__ = [
    "INTERNAL_TOPIC_DEFAULTS",
    "MAX_RETENTION_MS",
    "REPARTITION_DEFAULTS",
    "UNWINDOWED_CHANGELOG_DEFAULTS",
    "VERSIONED_CHANGELOG_ADDITIONAL_COMPACTION_LAG",
    "WINDOWED_CHANGELOG_DEFAULTS",
    "WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION",
    "changelog_config",
    "repartition_config",
    "versioned_changelog_config",
]

WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION = 86_400_000
"""Kafka Streams' default `windowstore.changelog.additional.retention.ms`: one day."""
VERSIONED_CHANGELOG_ADDITIONAL_COMPACTION_LAG = 86_400_000
"""Kafka Streams' `VERSIONED_STORE_CHANGE_LOG_ADDITIONAL_COMPACTION_LAG_MS`: one day (not the
window-store setting, which Kafka does not reuse for versioned stores)."""
MAX_RETENTION_MS = 2**63 - 1
"""Kafka's largest `retention.ms` (a Java long): a retention past it saturates, as in Kafka
Streams, instead of being refused by the broker."""

INTERNAL_TOPIC_DEFAULTS: dict[str, str] = {"message.timestamp.type": "CreateTime"}
REPARTITION_DEFAULTS: dict[str, str] = {
    **INTERNAL_TOPIC_DEFAULTS,
    "cleanup.policy": "delete",
    "segment.bytes": str(50 * 1024 * 1024),
    "retention.ms": "-1",
}
UNWINDOWED_CHANGELOG_DEFAULTS: dict[str, str] = {
    **INTERNAL_TOPIC_DEFAULTS,
    "cleanup.policy": "compact",
}
WINDOWED_CHANGELOG_DEFAULTS: dict[str, str] = {
    **INTERNAL_TOPIC_DEFAULTS,
    "cleanup.policy": "compact,delete",
}


def repartition_config() -> dict[str, str]:
    """A repartition topic's configs (a new dict: callers may add to it)."""
    return dict(REPARTITION_DEFAULTS)


def changelog_config(
    retention: int | None,
    additional_retention: int = WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION,
) -> dict[str, str]:
    """A store's changelog configs: compacted for a key-value store (`retention` None);
    compacted and deleted after `retention + additional_retention` ms for a time-bounded one."""
    if retention is None:
        return dict(UNWINDOWED_CHANGELOG_DEFAULTS)
    keep = min(retention + additional_retention, MAX_RETENTION_MS)
    return {**WINDOWED_CHANGELOG_DEFAULTS, "retention.ms": str(keep)}


def versioned_changelog_config(
    history_retention: int, additional_lag: int = VERSIONED_CHANGELOG_ADDITIONAL_COMPACTION_LAG
) -> dict[str, str]:
    """A versioned store's changelog configs: compacted, but no record younger than
    `history_retention + additional_lag` ms compacted away."""
    lag = min(history_retention + additional_lag, MAX_RETENTION_MS)
    return {**UNWINDOWED_CHANGELOG_DEFAULTS, "min.compaction.lag.ms": str(lag)}

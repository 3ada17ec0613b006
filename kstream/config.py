"""Application configuration, validated when it is built.

An unknown key is an error that lists the valid ones; a bad value names the key and the form
expected. Nothing here is checked lazily on the first record.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kstream.config_checks import (
    COMBINATION_RULES,
    KEY_RULES,
    check_kafka_keys_against_engine,
    checked_value,
    replaced_keys,
)
from kstream.errors import ConfigError
from kstream.internal_topics import WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION

MAX_TOPIC_NAME = 249
APP_ID_MAX_LEN = 200
"""An app id names topics (`<app_id>-<store>-changelog`, `<app_id>-instances`, ...) and a
directory under `state_dir`; 200 characters leave room for the suffixes within Kafka's 249."""
_APP_ID = re.compile(r"[A-Za-z0-9._-]+")


def _default_state_dir() -> str:
    import tempfile  # only for the default: tempfile's import costs every process start

    return os.path.join(tempfile.gettempdir(), "kstream-state")


@dataclass(frozen=True)
class Config:
    """Engine settings. Durations are stored as int milliseconds."""

    batch_max_records: int = 10_000
    batch_max_wait: int = 100
    commit_interval: int = 100
    state_dir: str = field(default_factory=_default_state_dir)
    default_backend: str = "memory"
    # broker_compat="tansu": how long, in stream time, a task keeps a provenance high mark no
    # record moved (kstream.broker_compat.HighMarks); unused with broker_compat="none"
    broker_compat_marks_retention: int = 7 * 24 * 3_600_000
    # the deprecated name of broker_compat_marks_retention, which it sets (with a warning);
    # None: not given. It never set a dedup store's retention (deduplicate() has its own)
    dedup_retention: int | None = None
    # a policy ("fail", "skip", "dlq") or a handler `(context, record, exception) -> Response`
    # (kstream.runtime.policies); production errors follow on_processing_error unless
    # on_production_error is set
    on_deserialization_error: Any = "fail"
    on_processing_error: Any = "fail"
    on_production_error: Any = None
    # a changelog record a restore refuses (kstream.state.restore_check): "fail" or "skip"
    on_restore_error: str = "fail"
    dlq_topic: str | None = None
    http: str | None = None
    http_token: str | None = None
    connect_timeout: int = 10_000
    shutdown_timeout: int = 30_000
    # internal topics' replication factor; -1 takes the broker's default.replication.factor
    replication_factor: int = -1
    # Kafka Streams' windowstore.changelog.additional.retention.ms: a window, session or dedup
    # store's changelog keeps records for the store's retention plus this (clock drift)
    windowstore_changelog_additional_retention: int = WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION
    # Kafka Streams' repartition.purge.interval.ms: at most this often, after a commit, the
    # records of repartition topics below the committed offsets are deleted (kstream.runtime.purge)
    repartition_purge_interval: int = 30_000
    kafka: Mapping[str, Any] = field(default_factory=dict)
    # compensations for a broker that is not Apache Kafka ("tansu"); the default, "none", is
    # Kafka's behaviour. The default comes from KSTREAM_BROKER_COMPAT when that is set.
    broker_compat: str = field(
        default_factory=lambda: os.environ.get("KSTREAM_BROKER_COMPAT", "none")
    )
    # Pause Python's cyclic garbage collector while a batch is processed (see thread.py)
    gc_pause: bool = True
    # Kafka Streams' metrics.recording.level: state-store operation metrics (counts, latency)
    # are recorded at "debug" (and "trace", which adds nothing more here); "info" keeps the rest
    metrics_recording_level: str = "info"
    # warn (at most once a minute per task) and count kstream_records_future_timestamp_total
    # when a record moves a task's stream time more than this ahead of the wall clock: every
    # record with an earlier timestamp is then late for windows and joins, as in Kafka Streams
    # (kstream.runtime.future_timestamps); 0 or None: off
    future_timestamp_warning: int = 86_400_000
    # warn, again every such interval, while a rebalance lasts longer than this (a member that
    # does not poll, a broker that lost track of members; kstream.runtime.slow_rebalance);
    # 0 or None: off
    slow_rebalance_warning: int = 60_000
    # "auto", "cooperative", "eager", "consumer" or "streams" (kstream.runtime.rebalance):
    # which partitions a rebalance takes from the stream thread, only those that move or all
    # of them, and whether the broker assigns them (consumer: KIP-848, Apache Kafka 4.0+;
    # streams: KIP-1071, 4.2+); auto: streams where the broker offers it, else cooperative
    # (kstream.runtime.streams_protocol)
    rebalance_protocol: str = "auto"
    # Kafka's group.instance.id (static membership): a restart within session.timeout.ms
    # moves no task; worker processes get "<id>-<worker index>"; None: a dynamic member
    group_instance_id: str | None = None
    # Kafka's max.task.idle.ms (KIP-353): how long a task reading several partitions waits
    # for an empty one that is caught up before processing the others; 0 (Kafka's default)
    # waits only while an empty partition is known to have data at the broker, -1 never waits
    # (kstream.runtime.idling)
    max_task_idle_ms: int = 0
    # Kafka's statestore.cache.max.bytes: the record cache (kstream.state.caching) that
    # coalesces a key's table updates between commits before they are forwarded; bytes of the
    # instance, divided among its worker processes (one stream thread each); 0 (the default
    # here, 10 MB in Kafka) turns it off
    cache_max_bytes: int = 0
    # Kafka's num.standby.replicas: how many other instances keep a standby copy of each
    # task's stores, following its changelogs, so a failover restores only the tail
    # (kstream.runtime.standby); 0 (Kafka's default) keeps none
    num_standby_replicas: int = 0
    # Kafka's acceptable.recovery.lag (KIP-441): with standby replicas, an instance that
    # joins while others run the app first warms up the standbys placed on it and joins the
    # group once each is within this many changelog records of its end
    # (kstream.runtime.standby); -1: join at once
    acceptable_recovery_lag: int = 10_000
    # Kafka's StoreQueryParameters.enableStaleStores() as the default of the HTTP store
    # queries: also answer from standby copies (possibly behind the active task)
    enable_stale_stores: bool = False

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None = None, **overrides: Any) -> Config:
        """Build and validate a Config from a dict (plus keyword overrides)."""
        merged: dict[str, Any] = dict(mapping or {})
        merged.update(overrides)
        valid = cls.keys()
        unknown = sorted(k for k in merged if k not in valid)
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(map(repr, unknown))}; "
                f"valid keys are: {', '.join(valid)}"
            )
        return cls(**merged)

    def __post_init__(self) -> None:
        """Check every key by its row of `KEY_RULES`, storing the value as the row returns it,
        then the combinations of keys (`COMBINATION_RULES`)."""
        for key, check, form in KEY_RULES:
            object.__setattr__(self, key, checked_value(key, check, form, getattr(self, key)))
        for key, value in replaced_keys(self).items():
            object.__setattr__(self, key, value)
        for contradicts, message in COMBINATION_RULES:
            if contradicts(self):
                raise ConfigError(message)
        check_kafka_keys_against_engine(self)


def validate_app_id(app_id: object, key: str = "app_id") -> str:
    """`app_id` if Kafka can name topics after it and it is a safe directory name.

    The rules are Kafka's for topic names (`[a-zA-Z0-9._-]`, not `.` or `..`), with a length
    that leaves room for the suffixes of the topics derived from it.
    """
    form = (
        f"1 to {APP_ID_MAX_LEN} letters, digits, '.', '_' or '-' (not '.' or '..'), e.g. "
        "'word-count'"
    )
    if not isinstance(app_id, str) or not app_id:
        raise ConfigError(f"{key}: required, {form}; got {app_id!r}")
    bad = sorted(set(_APP_ID.sub("", app_id)))
    if bad:
        raise ConfigError(f"{key}: {app_id!r} contains {''.join(bad)!r}; expected {form}")
    if app_id in (".", ".."):
        raise ConfigError(f"{key}: {app_id!r} is not allowed; expected {form}")
    if len(app_id) > APP_ID_MAX_LEN:
        raise ConfigError(
            f"{key}: {len(app_id)} characters is too long; expected {form} (topics named "
            f"after it must fit Kafka's {MAX_TOPIC_NAME})"
        )
    return app_id


_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_HOSTNAME = re.compile(r"[A-Za-z0-9._-]+")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]+(%[A-Za-z0-9._-]+)?\]")
_PORT = re.compile(r"[0-9]{1,5}")


def validate_bootstrap_servers(value: object, key: str = "bootstrap_servers") -> str:
    """`value` if it is a comma-separated list of `HOST:PORT` that librdkafka can use.

    A host is a name, an IPv4 address or a bracketed IPv6 address (`[::1]:9092`); an entry may
    start with a security protocol as a listener name (`SASL_SSL://host:9093`), as librdkafka
    allows. The port is required (librdkafka would quietly use 9092, and Kafka's Java clients
    refuse an entry without one) and lies in 1-65535. Checked before anything connects: a
    typo here would otherwise cost the whole connect_timeout and surface as an unreachable
    broker (librdkafka reads `127.0.0.1:notaport` as port 0).
    """
    form = "HOST:PORT[,HOST:PORT...] such as '127.0.0.1:9092' or '[::1]:9092,kafka-2:9092'"
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: expected {form}, got {value!r}")
    entries = value.split(",")
    for n, entry in enumerate(entries, 1):
        problem = _broker_problem(entry.strip())
        if problem is not None:
            where = f"entry {n} of {value!r}: " if len(entries) > 1 else ""
            raise ConfigError(f"{key}: {where}{problem}; expected {form}")
    return value


def _broker_problem(entry: str) -> str | None:
    """What is wrong with one entry of a bootstrap list, or None."""
    if not entry:
        return "an empty entry"
    rest = entry
    if "://" in rest:
        proto, _, rest = rest.partition("://")
        if proto.upper() not in _SECURITY_PROTOCOLS:
            return (
                f"{entry!r} starts with {proto + '://'!r}; a listener name must be one of "
                f"{', '.join(_SECURITY_PROTOCOLS)}"
            )
    if rest.startswith("["):
        host, sep, port = rest.rpartition("]:")
        host += "]"
        if not sep or not _IPV6.fullmatch(host):
            return f"{entry!r} is not '[IPV6]:PORT'"
    else:
        host, sep, port = rest.rpartition(":")
        if not sep:
            return f"{entry!r} has no port"
        if ":" in host:
            return f"{entry!r}: write an IPv6 address in brackets, e.g. '[::1]:9092'"
        if not _HOSTNAME.fullmatch(host):
            return f"{entry!r} has no valid host name before ':{port}'"
    if not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        return f"{entry!r} has port {port!r}, not a number 1-65535"
    return None


def validate_topic_names(app_id: str, names: list[str], key: str = "app_id") -> None:
    """Every topic derived from `app_id` fits Kafka's limit (checked before any is created)."""
    too_long = sorted((n for n in names if len(n) > MAX_TOPIC_NAME), key=len)
    if too_long:
        raise ConfigError(
            f"{key}: {app_id!r} makes topic {too_long[-1]!r} {len(too_long[-1])} characters "
            f"long, over Kafka's {MAX_TOPIC_NAME}; use a shorter app_id or store name"
        )


def app_state_dir(state_dir: str, app_id: str) -> str:
    """`<state_dir>/<app_id>`, refusing any app id that would leave `state_dir`."""
    validate_app_id(app_id)
    base = os.path.abspath(state_dir)
    path = os.path.join(base, app_id)
    if os.path.dirname(path) != base:
        raise ConfigError(f"app_id: {app_id!r} leads outside state_dir {state_dir!r}")
    return path


def prepare_state_dir(state_dir: str, app_id: str) -> str:
    """Create `<state_dir>/<app_id>` and check that it can be written; ConfigError if not."""
    path = app_state_dir(state_dir, app_id)
    if os.path.exists(state_dir) and not os.path.isdir(state_dir):
        raise ConfigError(f"state_dir: {state_dir!r} is a file; expected a writable directory")
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".write-check-{os.getpid()}")
        with open(probe, "w", encoding="ascii") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise ConfigError(
            f"state_dir: cannot create or write {path!r} ({e.strerror or e}); expected a "
            "writable directory"
        ) from None
    return path

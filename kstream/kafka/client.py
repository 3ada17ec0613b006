"""What every kstream Kafka client shares: configuration assembly and the bounded connect check.

librdkafka never gives up on an unreachable bootstrap address: it retries in the background
while calls wait. kstream clients instead ask for cluster metadata once, at construction, with
a deadline, and fail with an error naming the address and the last error librdkafka reported
(a refused connection, a TLS failure), so a typo in an address is a clear error, not a hang.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException

from kstream.config import validate_bootstrap_servers
from kstream.duration import DurationLike, duration
from kstream.errors import BrokerUnreachableError, ConfigError, KafkaClientError
from kstream.kafka.errors import AuthenticationError
from kstream.kafka.log_repeats import RepeatFilter
from kstream.security import validate_security

__all__ = ["DEFAULT_CONNECT_TIMEOUT_MS", "ErrorLog", "build_config", "check_connected"]

DEFAULT_CONNECT_TIMEOUT_MS = 10_000
LIBRDKAFKA_LOGGER = logging.getLogger("kstream.kafka.librdkafka")
# one line per interval for a failure librdkafka logs at every reconnect (kstream.kafka.log_repeats)
LIBRDKAFKA_LOGGER.addFilter(RepeatFilter())

_SLICE_S = 0.5
_AUTH_CODES = (
    KafkaError._SSL,
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
)

# Keys kstream owns for a client: passing them in `kafka` would silently break the client.
_RESERVED = ("error_cb", "on_delivery", "on_commit")


class _Client(Protocol):
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...
    def poll(self, timeout: float = ...) -> Any: ...


class ErrorLog:
    """Collects the errors librdkafka reports through `error_cb` (served by poll calls)."""

    def __init__(self, limit: int = 20) -> None:
        self._errors: list[KafkaError] = []
        self._limit = limit
        self._lock = threading.Lock()

    def __call__(self, err: KafkaError) -> None:
        with self._lock:
            self._errors.append(err)
            del self._errors[: -self._limit]

    def last(self) -> KafkaError | None:
        with self._lock:
            return self._errors[-1] if self._errors else None

    def find(self, codes: tuple[int, ...]) -> KafkaError | None:
        """The most recent error with one of `codes`."""
        with self._lock:
            for e in reversed(self._errors):
                if e.code() in codes:
                    return e
        return None

    def fatal(self) -> KafkaError | None:
        with self._lock:
            for e in reversed(self._errors):
                if e.fatal():
                    return e
        return None

    def summary(self) -> str:
        with self._lock:
            seen: list[str] = []
            for e in self._errors:
                text = f"{e.name()}: {e.str()}"
                if text not in seen:
                    seen.append(text)
        return "; ".join(seen[-3:])


def build_config(
    bootstrap_servers: str,
    kafka: Mapping[str, Any] | None,
    *,
    defaults: Mapping[str, Any],
    forced: Mapping[str, Any],
    errors: ErrorLog,
    where: str,
) -> dict[str, Any]:
    """Merge `defaults` < user `kafka` < `forced`, checking security settings first."""
    # a malformed address is a bad setting now, not an unreachable broker after the timeout
    validate_bootstrap_servers(bootstrap_servers, key=f"{where}: bootstrap_servers")
    user = dict(kafka or {})
    validate_security(user)
    reserved = sorted(k for k in user if k in _RESERVED)
    if reserved:
        raise ConfigError(
            f"kafka: {', '.join(reserved)} cannot be set here; kstream installs its own "
            "callbacks to surface errors"
        )
    conf: dict[str, Any] = {"logger": LIBRDKAFKA_LOGGER}
    conf.update(defaults)
    conf.update(user)
    conf.update(forced)
    conf["bootstrap.servers"] = bootstrap_servers
    conf["error_cb"] = errors
    return conf


def connect_timeout_s(value: DurationLike | None) -> float:
    ms = DEFAULT_CONNECT_TIMEOUT_MS if value is None else duration(value, name="connect_timeout")
    if ms <= 0:
        raise ConfigError(f"connect_timeout: must be greater than zero, got {value!r}")
    return ms / 1000.0


def check_connected(
    client: _Client,
    bootstrap_servers: str,
    timeout_s: float,
    errors: ErrorLog,
    what: str,
) -> None:
    """Raise BrokerUnreachableError (or AuthenticationError) unless metadata arrives in time.

    Metadata is requested in short slices so a TLS or SASL failure, which no retry will fix,
    is reported as soon as librdkafka sees it rather than at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    last_exc: KafkaException | None = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _unreachable(bootstrap_servers, timeout_s, errors, what, last_exc)
        try:
            md = client.list_topics(timeout=min(_SLICE_S, left))
        except KafkaException as e:
            last_exc = e
            _drain(client)
            if errors.find(_AUTH_CODES) is not None:
                raise _unreachable(bootstrap_servers, timeout_s, errors, what, e) from None
            continue
        if md.brokers:
            return
        _drain(client)


def _drain(client: _Client) -> None:
    try:
        client.poll(0)
    except Exception:  # the client may be half-broken; the error log is what matters
        pass


def _unreachable(
    bootstrap: str,
    timeout_s: float,
    errors: ErrorLog,
    what: str,
    exc: KafkaException | None,
) -> KafkaClientError:
    detail = errors.summary()
    if not detail and exc is not None:
        detail = str(exc.args[0].str() if exc.args else exc)
    last = errors.last()
    auth = errors.find(_AUTH_CODES)
    if auth is not None:
        return AuthenticationError(
            f"{what}: TLS/SASL handshake with Kafka at {bootstrap!r} failed: "
            f"{auth.name()}: {auth.str()}",
            code=auth.name(),
        )
    return BrokerUnreachableError(
        f"{what}: Kafka at {bootstrap!r} did not answer within {timeout_s:g}s"
        + (f" ({detail})" if detail else ""),
        code=last.name() if last is not None else None,
        retriable=True,
    )

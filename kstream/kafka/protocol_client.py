"""kafka-python as kstream's second network stack: the protocol client's settings and
connections.

librdkafka carries kstream's data, transactions and classic groups, but cannot send requests
it does not know (the Streams group RPCs, kstream.kafka.streams_group). kafka-python 3.x can;
this module gives it the app's connection settings and watches its connections.

Settings. An app configures Kafka once, in librdkafka's terms (its `kafka` table). `settings`
carries that table over to kafka-python, so the protocol client reaches the same brokers the
same way as the data clients; a security setting it cannot carry over raises ConfigError
naming the key, at construction, instead of a client that connects differently or not at all.

Connections. kafka-python's bootstrap retries a refused authentication until its timeout and
only logs why. `connect` gives the client a connection manager that keeps the last reason a
connection could not be set up, and the one a retry cannot fix (SASL refused, a mechanism the
broker does not offer), so the protocol client can fail at once, with the broker's reason.
Not always: Kafka answers a refused authentication and closes the connection a moment later
(`connection.failed.authentication.delay.ms`), and kafka-python 3.0.12 drops an answer it
reads together with the close; the refusal then shows as a dropped connection ("socket
disconnected"), retried until the call's timeout.

kafka-python is imported by `connect` and by an OAUTHBEARER token provider only: a process
that never makes a protocol client never loads it.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any

from kstream.config import validate_bootstrap_servers
from kstream.errors import ConfigError
from kstream.security import validate_security

__all__ = ["connect", "settings"]


_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: the security settings carried over (the rest of the table is the data clients' business)
_MAPPED_SSL = frozenset(
    {
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.crl.location",
        "ssl.cipher.suites",
        "ssl.endpoint.identification.algorithm",
        "enable.ssl.certificate.verification",
    }
)
_MAPPED_SASL = frozenset(
    {"sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password", "oauth_cb"}
)
#: what to do instead, for the settings that are not carried over
_HINTS = {
    "ssl.keystore.location": "convert the PKCS#12 key store to PEM files and set "
    "ssl.certificate.location and ssl.key.location (and ssl.key.password)",
    "ssl.keystore.password": "the PKCS#12 key store is not read: see ssl.keystore.location",
    "ssl.certificate.pem": "write the certificate to a file and set ssl.certificate.location",
    "ssl.key.pem": "write the key to a file and set ssl.key.location",
    "sasl.oauthbearer.method": "give an oauth_cb that fetches the token instead",
}


def _security_key(key: str) -> bool:
    return key.startswith(("ssl.", "sasl.", "ssl_", "enable.ssl.", "enable.sasl.")) or (
        key == "oauth_cb"
    )


def settings(
    bootstrap_servers: str,
    kafka: Mapping[str, Any] | None = None,
    *,
    where: str = "StreamsGroupClient",
) -> dict[str, Any]:
    """kafka-python's settings for the app's `bootstrap_servers` and librdkafka-style `kafka`.

    Carried over: security.protocol; sasl.mechanism(s) PLAIN, SCRAM-SHA-256/512 with
    sasl.username and sasl.password, and OAUTHBEARER through confluent-kafka's `oauth_cb`
    (with sasl.oauthbearer.config, which it is given); for TLS a context built from
    ssl.ca.location (a file, a directory or "probe") or ssl.ca.pem, ssl.certificate.location,
    ssl.key.location, ssl.key.password, ssl.crl.location, ssl.cipher.suites,
    ssl.endpoint.identification.algorithm and enable.ssl.certificate.verification; and
    client.id. A TLS setting under a TLS protocol, or a SASL setting under a SASL protocol,
    that is not carried over (a PKCS#12 key store, OIDC tokens, Kerberos: GSSAPI) raises
    ConfigError naming it: the protocol client would otherwise connect differently from the
    data clients, or not at all. Settings of a protocol not in use are ignored, as librdkafka
    ignores them.
    """
    validate_bootstrap_servers(bootstrap_servers, key=f"{where}: bootstrap_servers")
    conf = dict(kafka or {})
    validate_security(conf)
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    use_ssl, use_sasl = protocol.endswith("SSL"), protocol.startswith("SASL")
    for key in sorted(conf, key=str):
        if not _security_key(str(key)):
            continue
        is_sasl = key.startswith(("sasl.", "enable.sasl.")) or key == "oauth_cb"
        if (is_sasl and not use_sasl) or (not is_sasl and not use_ssl):
            continue  # a protocol not in use: librdkafka ignores it too
        if key not in _MAPPED_SSL | _MAPPED_SASL and not (
            key == "sasl.oauthbearer.config" and "oauth_cb" in conf
        ):
            hint = _HINTS.get(key, "kafka-python has no such setting")
            raise ConfigError(f"kafka[{key!r}] cannot be used by the protocol client: {hint}")
    settings: dict[str, Any] = {
        # librdkafka takes `PROTOCOL://host:port` entries; kafka-python takes host:port
        "bootstrap_servers": [s.strip().split("://")[-1] for s in bootstrap_servers.split(",")],
        "client_id": str(conf.get("client.id") or "kstream"),
        "security_protocol": protocol,
    }
    if use_sasl:
        settings.update(_sasl_settings(conf))
    if use_ssl:
        settings["ssl_context"] = _ssl_context(conf)
    return settings


def _sasl_settings(conf: Mapping[str, Any]) -> dict[str, Any]:
    key = "sasl.mechanism"
    if key not in conf and "sasl.mechanisms" in conf:
        key = "sasl.mechanisms"  # librdkafka's alias
    mechanism = str(conf.get(key, "GSSAPI")).upper()
    if mechanism not in _MECHANISMS:
        raise ConfigError(
            f"kafka[{key!r}] = {mechanism!r} cannot be used by the protocol client "
            f"(it speaks {', '.join(_MECHANISMS)}; GSSAPI/Kerberos is not carried over)"
        )
    out: dict[str, Any] = {"sasl_mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        callback = conf.get("oauth_cb")
        if not callable(callback):
            raise ConfigError(
                f"kafka[{key!r}] = 'OAUTHBEARER': the protocol client needs kafka['oauth_cb'] "
                "(confluent-kafka's token callback) to get its tokens"
            )
        out["sasl_oauth_token_provider"] = _token_provider(
            callback, conf.get("sasl.oauthbearer.config")
        )
    else:
        out["sasl_plain_username"] = conf.get("sasl.username")
        out["sasl_plain_password"] = conf.get("sasl.password")
    return out


def _ssl_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    """A client TLS context as librdkafka would verify: the CA (system roots when none is
    given, as librdkafka's probing finds them), the client certificate, the CRL, host names."""
    ca = conf.get("ssl.ca.location")
    try:
        if ca is None or ca == "probe":
            ctx = ssl.create_default_context()
        elif os.path.isdir(str(ca)):
            ctx = ssl.create_default_context(capath=str(ca))
        else:
            ctx = ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"kafka['ssl.ca.location'] = {ca!r}: {e}") from None
    if conf.get("ssl.ca.pem"):
        try:
            ctx.load_verify_locations(cadata=str(conf["ssl.ca.pem"]))
        except (ValueError, ssl.SSLError) as e:
            raise ConfigError(f"kafka['ssl.ca.pem']: not a PEM certificate: {e}") from None
    cert, key = conf.get("ssl.certificate.location"), conf.get("ssl.key.location")
    if cert is not None:
        try:
            ctx.load_cert_chain(
                str(cert), None if key is None else str(key), conf.get("ssl.key.password")
            )
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                f"kafka['ssl.certificate.location'] = {cert!r}, kafka['ssl.key.location'] = "
                f"{key!r}: the certificate and key do not load: {e}"
            ) from None
    elif key is not None:
        raise ConfigError("kafka['ssl.key.location'] is set without ssl.certificate.location")
    if conf.get("ssl.crl.location"):
        try:
            ctx.load_verify_locations(str(conf["ssl.crl.location"]))
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"kafka['ssl.crl.location']: {e}") from None
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if conf.get("ssl.cipher.suites"):
        try:
            ctx.set_ciphers(str(conf["ssl.cipher.suites"]))
        except ssl.SSLError as e:
            raise ConfigError(f"kafka['ssl.cipher.suites']: {e}") from None
    algorithm = str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower()
    if algorithm not in ("https", "none"):
        raise ConfigError(
            f"kafka['ssl.endpoint.identification.algorithm'] = {algorithm!r}: expected "
            "'https' or 'none'"
        )
    ctx.check_hostname = algorithm == "https"
    if str(conf.get("enable.ssl.certificate.verification", "true")).lower() in ("false", "0"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _token_provider(callback: Callable[..., Any], config: Any) -> Any:
    """kafka-python's OAUTHBEARER token provider over confluent-kafka's `oauth_cb`, which
    returns (token, expiry in seconds since the epoch[, principal, extensions]); the token
    is kept until a minute before it expires."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class OAuthCallbackProvider(AbstractTokenProvider):  # type: ignore[misc,unused-ignore]
        def __init__(self) -> None:
            self._token: str | None = None
            self._expiry = 0.0
            self._extensions: dict[str, str] = {}

        def token(self) -> str:
            if self._token is None or time.time() > self._expiry - 60:
                answer = callback(config)
                self._token, self._expiry = str(answer[0]), float(answer[1])
                if len(answer) > 3 and answer[3]:
                    self._extensions = dict(answer[3])
            return self._token

        def extensions(self) -> dict[str, str]:
            return self._extensions

    return OAuthCallbackProvider()


def connect(config: Mapping[str, Any]) -> tuple[Any, Any]:
    """kafka-python's client for `config` (from `settings`) and its connection manager, which
    keeps `last_failure` (why the last connection could not be set up) and `refused` (the
    last such reason a retry cannot fix: an exception with a Kafka error code that is not
    retriable, e.g. SASL_AUTHENTICATION_FAILED). Nothing connects yet.

    kafka-python logs every connection, bootstrap and metadata refresh at INFO, about twenty
    lines per client, which say nothing to an app's operator (every App asks the broker about
    its group at start-up, kstream.runtime.streams_protocol): its "kafka" logger is set to
    WARNING unless the app set a level for it."""
    import weakref

    from kafka import errors as kerrors
    from kafka.net.compat import KafkaNetClient
    from kafka.net.manager import KafkaConnectionManager
    from kafka.net.selector import NetworkSelector

    quiet = logging.getLogger("kafka")
    if quiet.level == logging.NOTSET:
        quiet.setLevel(logging.WARNING)

    class WatchfulManager(KafkaConnectionManager):  # type: ignore[misc,unused-ignore]
        def __init__(self, net: Any, **configs: Any) -> None:
            super().__init__(net, **configs)
            self.last_failure: BaseException | None = None
            self.refused: BaseException | None = None
            self._watched: weakref.WeakSet[Any] = weakref.WeakSet()

        def get_connection(self, node_id: Any, *args: Any, **kwargs: Any) -> Any:
            conn = super().get_connection(node_id, *args, **kwargs)
            if conn not in self._watched:
                self._watched.add(conn)
                conn.init_future.add_errback(self._set_up_failed)
            return conn

        def _set_up_failed(self, error: BaseException) -> None:
            self.last_failure = error
            code = getattr(error, "errno", None)
            if isinstance(code, int) and not isinstance(error, kerrors.RetriableError):
                self.refused = error

    net = NetworkSelector(**config)
    manager = WatchfulManager(net, **config)
    return KafkaNetClient(net=net, manager=manager), manager

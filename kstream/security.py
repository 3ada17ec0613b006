"""Start-up checks of the security settings handed to librdkafka.

librdkafka reports a missing CA file only when it first connects, as a log line; we check the
files and the mechanism settings before any client is created so the error names the key.
The rules are settings rules, so they live beside `kstream.config`, which checks an app's
`kafka` table with them when it is built; the clients (`kstream.kafka.client`) check the
settings they are handed with the same function.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kstream.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
FILE_KEYS = (
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.keystore.location",
    "ssl.crl.location",
    "sasl.kerberos.keytab",
)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")


def validate_security(kafka: Mapping[str, Any], *, where: str = "kafka") -> None:
    """Raise ConfigError if the security settings cannot work, naming the offending key."""
    proto = str(kafka.get("security.protocol", "PLAINTEXT")).upper()
    if proto not in PROTOCOLS:
        raise ConfigError(
            f"{where}['security.protocol'] = {kafka.get('security.protocol')!r} is not one of "
            f"{', '.join(PROTOCOLS)}"
        )
    for key in FILE_KEYS:
        path = kafka.get(key)
        if path is None or path == "probe":
            continue
        if not isinstance(path, str) or not os.path.exists(path):
            raise ConfigError(f"{where}[{key!r}]: file not found: {path!r}")
        if not os.access(path, os.R_OK):
            raise ConfigError(f"{where}[{key!r}]: file not readable: {path!r}")
    if proto.startswith("SASL"):
        mech = str(kafka.get("sasl.mechanism", kafka.get("sasl.mechanisms", "GSSAPI"))).upper()
        if mech not in SASL_MECHANISMS:
            raise ConfigError(
                f"{where}['sasl.mechanism'] = {mech!r} is not one of {', '.join(SASL_MECHANISMS)}"
            )
        if mech == "PLAIN" or mech.startswith("SCRAM"):
            for key in ("sasl.username", "sasl.password"):
                if not kafka.get(key):
                    raise ConfigError(
                        f"{where}[{key!r}] is required with security.protocol={proto} "
                        f"and sasl.mechanism={mech}"
                    )
    elif any(str(k).startswith("sasl.") for k in kafka if k != "sasl.kerberos.keytab"):
        sasl = sorted(k for k in kafka if str(k).startswith("sasl."))
        raise ConfigError(
            f"{where}: {', '.join(sasl)} set but security.protocol={proto} does not use SASL; "
            "use SASL_PLAINTEXT or SASL_SSL"
        )

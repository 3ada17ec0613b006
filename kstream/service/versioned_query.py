"""Versioned stores over HTTP: Kafka's IQv2 `VersionedKeyQuery` and `MultiVersionedKeyQuery`.

A versioned key-value store (KIP-889) keeps every value a key had for its history retention, so
a key query can ask for more than the latest value (KIP-960, KIP-968):

- `GET /stores/{store}/keys/{key}` is the latest version, `?as_of=T` the version valid at time
  T (`VersionedKeyQuery.withKey(k).asOf(T)`);
- `GET /stores/{store}/versions/{key}?from=T1&to=T2&order=asc|desc` every version valid at some
  time in [T1, T2] (either bound may be left out), newest first unless `order=asc`
  (`MultiVersionedKeyQuery`); tombstones are not versions.

Each version answers as `{"value", "timestamp", "valid_to"}` (`valid_to` null for the latest).
The request is routed to the instance that owns the key's partition like any key query (the
query string travels with it). A time or an order that does not parse is a 400 naming the
parameter; a version query of a store that is not versioned is a 400 `not_versioned`; no
version (the key unknown, or nothing valid in the range) is a 404 `key_not_found`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kstream.service.http import Problem
from kstream.service.keys import jsonable

__all__ = ["VERSIONED_KIND", "VersionQuery", "answer", "with_version_query"]

VERSIONED_KIND = "versioned_key_value"


@dataclass(frozen=True)
class VersionQuery:
    """What a versioned key query asks: one version (`as_of`, None: the latest) or, with
    `multi`, the versions valid in [from_time, to_time]."""

    multi: bool = False
    as_of: int | None = None
    from_time: int | None = None
    to_time: int | None = None
    ascending: bool = False


def _time(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    text = values[-1]
    try:
        return int(text)
    except ValueError:
        raise Problem(
            400, "bad_request", f"{name} must be a timestamp in milliseconds, got {text!r}"
        ) from None


def parse(what: str, query: dict[str, list[str]]) -> VersionQuery | None:
    """The version query of a `/keys` (with `as_of`) or `/versions` request, None for a plain
    key query; Problem 400 for a parameter that does not fit."""
    if what == "versions":
        if "as_of" in query:
            raise Problem(400, "bad_request", "as_of is for /keys; /versions takes from and to")
        order = (query.get("order") or ["desc"])[-1].lower()
        if order not in ("asc", "desc"):
            raise Problem(400, "bad_request", f"order must be asc or desc, got {order!r}")
        lo, hi = _time(query, "from"), _time(query, "to")
        if lo is not None and hi is not None and lo > hi:
            raise Problem(400, "bad_request", f"from ({lo}) is after to ({hi})")
        return VersionQuery(True, None, lo, hi, order == "asc")
    as_of = _time(query, "as_of")
    return None if as_of is None else VersionQuery(as_of=as_of)


def with_version_query(loc: Any, what: str, query: dict[str, list[str]]) -> Any:
    """`loc` (a `kstream.service.query.Location`) carrying the request's version query."""
    versions = parse(what, query)
    return loc if versions is None else dataclasses.replace(loc, versions=versions)


def _version(record: Any) -> dict[str, Any]:
    return {
        "value": jsonable(record.value),
        "timestamp": record.timestamp,
        "valid_to": record.valid_to,
    }


def answer(loc: Any, kind: str, views: Sequence[Any], instance_id: str) -> dict[str, Any] | None:
    """The answer of a key query on a versioned store from this instance's `views` of it, or
    None when the store is not versioned and no version was asked (a plain key query)."""
    asked: VersionQuery | None = getattr(loc, "versions", None)
    if kind != VERSIONED_KIND:
        if asked is None:
            return None
        raise Problem(
            400,
            "not_versioned",
            f"store {loc.store!r} is a {kind} store: as_of and /versions need a versioned "
            "store (stores.versioned_key_value, or table(..., versioned=...))",
        )
    asked = asked or VersionQuery()
    body: dict[str, Any] = {"store": loc.store, "key": jsonable(loc.key)}
    for view in views:
        partition = getattr(view, "partition", loc.partition)
        if asked.multi:
            found = view.versions(loc.key, asked.from_time, asked.to_time, asked.ascending)
            if found:
                body["versions"] = [_version(r) for r in found]
                return {**body, "partition": partition, "instance_id": instance_id}
            continue
        one = view.get(loc.key) if asked.as_of is None else view.get(loc.key, asked.as_of)
        if one is not None:
            body.update(_version(one))
            return {**body, "partition": partition, "instance_id": instance_id}
    when = (
        f"valid between {asked.from_time} and {asked.to_time}"
        if asked.multi
        else "latest"
        if asked.as_of is None
        else f"valid at {asked.as_of}"
    )
    raise Problem(
        404, "key_not_found", f"key {loc.key!r} has no version {when} in store {loc.store!r}"
    )

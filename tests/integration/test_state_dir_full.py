"""The device holding state_dir fills up under a running app: it stops saying so.

Before, the app stopped on "lmdb store ...: write failed: mdb_txn_commit: No space left on
device" (or "Input/output error", depending on the filesystem), which named neither the
directory to clean nor the cause plainly. state_dir here is a real 1 MiB tmpfs (skipped where
mounting is not permitted), filled by a table of 60 KB values.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from support.tiny_fs import tiny_fs

from kstream.dsl import StreamBuilder
from kstream.errors import RecordError, StoreError
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState


def test_a_full_state_dir_stops_the_app_naming_the_device(
    bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = bootstrap_servers
    src, app_id = unique_name("in"), unique_name("app")
    Admin(bs).create_topic(src, 1)
    b = StreamBuilder()
    b.table(src, key_serde="string", value_serde="bytes", store="latest")
    with tiny_fs(tmp_path / "state", "1m") as state_dir:
        app = App(
            b,
            app_id,
            bs,
            "at_least_once",
            {"state_dir": str(state_dir), "default_backend": "lmdb", "commit_interval": 50},
        )
        app.start()
        try:
            p = Producer(bs)
            for i in range(30):
                p.produce(src, bytes(60_000), key=b"key-%d" % i)
            p.flush()
            deadline = time.monotonic() + 30
            while app.state != AppState.ERROR and time.monotonic() < deadline:
                time.sleep(0.05)
            assert app.state == AppState.ERROR, "the app wrote 1.8 MB to a 1 MiB device"
        finally:
            app.close()
        err = app.error
        assert isinstance(err, StoreError) and not isinstance(err, RecordError), repr(err)
        assert str(err).startswith(
            f"no space left on the device holding state_dir ({state_dir}): "
        ), err
        assert "lmdb store 'latest' partition 0" in str(err), err

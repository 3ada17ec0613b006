"""The error policies on the standalone cluster: bad input when the records are processed and
written by executors in other processes, and Spark retries a failed task before it gives up.

One job (`kstreamd run --engine spark --master spark://...`), with
`on_deserialization_error=dlq`, `on_processing_error=fail` and five records per batch, over the
native bad-input test's records (`bad_input.INPUT`). The first batch (offsets 0-4) writes its
four results and dead-letters the record that is not JSON (offset 3), the raw record with its
own header and the `kstream.error.*` headers; the second batch fails on the division by zero at
offset 6: the job exits 1 with kstream's own one-line error naming the record, in the words
the native engine's error has for it (a native app runs the same configuration beside it), and
nothing of that batch is written.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from bad_input import BAD_JSON, GOOD, ZERO, Topics, check_dead_letter, input_records, only_stateless
from jobs import Names, Submit
from spark_helpers import create_topics, produce_raw, read_back
from support.groups import fast_group

from kstream.errors import ProcessingError
from kstream.runtime import App, AppState

pytest.importorskip("pyspark")


@pytest.mark.timeout(420)
def test_dlq_then_fail_on_cluster(
    submit: Submit,
    spark_cluster: Any,
    bootstrap_servers: str,
    unique_name: Names,
    tmp_path: Path,
) -> None:
    bs = bootstrap_servers
    inp, out, dlq = unique_name("in"), unique_name("out"), unique_name("dlq")
    create_topics(bs, {inp: 1, out: 1})
    produce_raw(bs, inp, input_records())
    policies = {"on_deserialization_error": "dlq", "on_processing_error": "fail"}
    native_id, native_out = unique_name("native"), unique_name("native-out")
    native = App(
        only_stateless(Topics(inp, inp, native_out, native_out)),
        native_id,
        bs,
        "exactly_once",
        fast_group(
            {**policies, "dlq_topic": unique_name("native-dlq"), "state_dir": str(tmp_path)}
        ),
    )
    native.start()

    app = unique_name("policies")
    env = {"TEST_IN_TOPIC": inp, "TEST_OUT_TOPIC": out, "KSTREAM_DLQ_TOPIC": dlq}
    env.update({f"KSTREAM_{key.upper()}": value for key, value in policies.items()})
    job = submit("cluster_apps:bad_input", app, "--max-records-per-batch", "5", env=env)
    log = tmp_path / f"{app}.log"
    try:
        rc = job.wait(360)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
        raise AssertionError(f"the job did not end: {log.read_text(errors='replace')[-3000:]}")
    assert native.wait_for(AppState.ERROR, timeout=120), native.state
    native.close()
    assert isinstance(native.error, ProcessingError)
    assert (native.error.topic, native.error.offset) == (inp, ZERO)

    text = log.read_text(errors="replace")
    assert rc == 1, text[-3000:]
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[-1] == f"kstreamd run: error: {native.error}", text[-3000:]

    # the first batch's results (offsets 0-4 but the dead letter), as the native engine
    # computes them; nothing of the second
    first_batch = [input_records()[i] for i in (0, 1, 2, 4)]
    assert read_back(bs, out, "string", "long") == [
        (k.decode(), GOOD[k.decode()], ts, headers) for k, _v, ts, headers in first_batch
    ]
    (dead,) = read_back(bs, dlq, "bytes", "bytes")
    check_dead_letter(dead, inp, BAD_JSON, "SerdeError", "invalid JSON")

"""The parts of `kstreamd run --processes N` that need no broker: the flag, the workers'
settings, the metrics merge and the validation of `kstream.run_processes`."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest
from support.exposition import lint_exposition

import kstream
from kstream.errors import ConfigError
from kstream.metrics import Metrics
from kstream.service.cli import main
from kstream.service.merge import Scrape, merge_expositions
from kstream.service.settings import Settings
from kstream.service.supervisor import Supervisor, parse_processes
from kstream.service.worker import WorkerSpec


@pytest.mark.parametrize(("given", "n"), [("1", 1), ("3", 3), (2, 2), (" 4", 4)])
def test_processes_is_a_positive_integer(given: object, n: int) -> None:
    assert parse_processes(given) == n  # type: ignore[arg-type]


def test_processes_auto_is_the_usable_cores() -> None:
    assert parse_processes("auto") == len(os.sched_getaffinity(0))
    assert parse_processes("AUTO") >= 1


@pytest.mark.parametrize("bad", ["0", "-2", "two", "", "1.5", True, 1.5, None])
def test_a_bad_processes_value_is_a_config_error_naming_the_key(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"^processes: expected a positive integer or 'auto'"):
        parse_processes(bad)  # type: ignore[arg-type]


def test_the_flag_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "mod:topology", "--processes", "0"])
    assert exc.value.code == 2
    assert "argument --processes: expected a positive integer or 'auto', got '0'" in (
        capsys.readouterr().err
    )


def test_run_processes_validates_before_starting_anything(tmp_path: Path) -> None:
    run = partial(kstream.run_processes, app_id="app", bootstrap_servers="127.0.0.1:1")
    with pytest.raises(ConfigError, match=r"^processes:"):
        run("mod:topology", processes=0)
    with pytest.raises(ConfigError, match=r"^app_id:"):
        kstream.run_processes("mod:topology", processes=2, app_id="a/b", bootstrap_servers="x:1")
    with pytest.raises(ConfigError, match="'batch_max_recrods'"):
        run("mod:topology", processes=2, config={"batch_max_recrods": 1})
    with pytest.raises(ConfigError, match="processing_guarantee"):
        run("mod:topology", processes=2, processing_guarantee="twice")
    with pytest.raises(ConfigError, match="no module named"):
        run("no_such_module_here:topology", processes=2)


def _supervisor(tmp_path: Path, **settings: object) -> Supervisor:
    base: dict[str, object] = {
        "app_id": "wc",
        "instance_id": "node",
        "config": {"state_dir": str(tmp_path), "http": "127.0.0.1:8080"},
    }
    base.update(settings)
    return Supervisor("mod:topology", Settings(**base), 3)  # type: ignore[arg-type]


def test_each_worker_has_its_own_instance_id_state_directory_and_port(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path)
    assert [s.instance_id for s in sup.slots] == ["node-0", "node-1", "node-2"]
    assert [s.state_dir for s in sup.slots] == [
        str(tmp_path / "wc" / "processes" / str(n)) for n in range(3)
    ]
    settings = sup._worker_settings(sup.slots[1], 41001)
    assert settings.instance_id == "node-1"
    assert settings.config["state_dir"] == str(tmp_path / "wc" / "processes" / "1")
    assert settings.config["http"] == "127.0.0.1:41001"
    assert settings.advertised_url is None
    assert settings.app_id == "wc"


def test_an_advertised_url_gives_each_worker_its_own_port(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, advertised_url="http://node1.example:8080")
    assert sup._worker_settings(sup.slots[2], 41002).advertised_url == (
        "http://node1.example:41002"
    )


def test_the_supervisor_needs_an_app_id_and_the_native_engine(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="app_id is required"):
        _supervisor(tmp_path, app_id=None)
    with pytest.raises(ConfigError, match=r"^processes: .*native engine"):
        _supervisor(tmp_path, engine="spark")


def test_worker_settings_travel_as_json_and_refuse_what_json_cannot_carry() -> None:
    spec = WorkerSpec("mod:topology", 1, {"app_id": "wc", "config": {"kafka": {"acks": "all"}}})
    assert WorkerSpec.from_json(spec.to_json()) == spec
    assert WorkerSpec.from_json(spec.to_json()).service_settings().app_id == "wc"
    with pytest.raises(ConfigError, match="cannot be passed to worker processes"):
        WorkerSpec("mod:topology", 0, {"config": {"state_dir": object()}}).to_json()


def _page(instance_id: str) -> str:
    m = Metrics("wc", guarantee="exactly_once", stores=[])
    m.instance_id = instance_id
    m.processed(5 if instance_id.endswith("0") else 7)
    return m.render().decode()


def test_merged_metrics_keep_every_workers_series_once() -> None:
    pages = [Scrape({"app_id": "wc", "instance_id": w}, _page(w)) for w in ("n-0", "n-1")]
    text = merge_expositions(pages).decode()
    given = [ln for p in pages for ln in p.text.splitlines() if not ln.startswith("#")]
    assert lint_exposition(text) == []
    series = [ln.rsplit(" ", 1)[0] for ln in text.splitlines() if not ln.startswith("#")]
    assert len(series) == len(set(series))
    assert len(series) == len(given)
    assert text.count("# TYPE kstream_records_processed_total counter") == 1
    processed = sorted(ln for ln in text.splitlines() if ln.startswith("kstream_records_processed"))
    assert processed == [
        'kstream_records_processed_total{app_id="wc",instance_id="n-0"} 5.0',
        'kstream_records_processed_total{app_id="wc",instance_id="n-1"} 7.0',
    ]


def test_a_series_without_the_workers_labels_gets_them_and_a_bad_page_is_left_out() -> None:
    plain = "# TYPE up gauge\nup 1\n"
    text = merge_expositions(
        [
            Scrape({"app_id": "wc", "instance_id": "n-0"}, plain),
            Scrape({"app_id": "wc", "instance_id": "n-1"}, plain),
            Scrape({"app_id": "wc", "instance_id": "n-2"}, "up{ 1 garbage\n"),
        ]
    ).decode()
    assert sorted(ln for ln in text.splitlines() if ln.startswith("up")) == [
        'up{app_id="wc",instance_id="n-0"} 1.0',
        'up{app_id="wc",instance_id="n-1"} 1.0',
    ]


def test_a_worker_that_does_not_stop_leaves_its_stacks_in_the_log(tmp_path: Path) -> None:
    """Before killing a worker that did not stop in time, the supervisor asks it (SIGUSR1) for
    every thread's stack, which the worker writes to its stderr: the log says where it hung."""
    import subprocess
    import sys

    from kstream.service import supervisor

    hung = (
        "import threading, time\n"
        "from kstream.service.worker import dump_stacks_on_request\n"
        "dump_stacks_on_request()\n"
        "def closing_forever():\n"
        "    time.sleep(60)\n"
        "threading.Thread(target=closing_forever, name='kstream-stream-thread').start()\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", hung],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(Path(__file__).parents[3]),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        slot = supervisor._Slot(0, "app-0", str(tmp_path), proc=proc)
        supervisor._dump_stacks(slot, proc)
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    dump = err.decode()
    assert "closing_forever" in dump, dump
    # Every thread: the main one may still be leaving its print (line 7) or already asleep (8).
    assert "Current thread 0x" in dump and " in <module>" in dump, dump


def test_a_worker_stopped_before_it_serves_exits_0(tmp_path: Path) -> None:
    """A supervisor stopped a second after its start sends SIGTERM to workers that may still
    be importing their topology: such a worker has processed nothing and exits 0, as a
    graceful stop does, rather than dying of the signal (which the supervisor reports as a
    failed worker). Here the topology's import blocks until the signal comes."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from kstream.service.worker import BOOTSTRAP, WorkerSpec

    marker = tmp_path / "importing"
    (tmp_path / "slow_app.py").write_text(
        f"import pathlib, time\npathlib.Path({str(marker)!r}).write_text('x')\ntime.sleep(60)\n"
    )
    spec = WorkerSpec("slow_app:topology", 0, {"app_id": "slow", "bootstrap_servers": "x:1"})
    proc = subprocess.Popen(
        [sys.executable, "-c", BOOTSTRAP, json.dumps([str(tmp_path), *sys.path])],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(spec.to_json() + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
    assert code == 0, code

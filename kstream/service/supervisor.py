"""`kstreamd run --processes N`: one command that uses every core.

Python's interpreter lock caps one stream thread at one core, so the supervisor starts N
worker processes of the same app instead: the same `app_id` (one consumer group sharing the
partitions), each with its own instance id (`<id>-<n>`) and its own state directory
(`<state_dir>/<app_id>/processes/<n>`, kept across restarts of worker n, so its stores and
process id carry over; `kstreamd reset` removes it with the rest of `<state_dir>/<app_id>`).
The supervisor locks `<state_dir>/<app_id>` while it runs, and each worker its own directory
(kstream.runtime.state_lock): a second supervisor or a lone instance on it is refused.

Restarts. A worker that dies is restarted after a backoff that doubles with every failure in a
row (0.5 s, 1 s, 2 s, ... up to 30 s) and starts again from 0.5 s once the worker has been
ready. Every exit is logged with its status, and restarts are counted per worker
(`kstream_supervisor_worker_restarts_total`). `/health/live` turns 503 when a worker has
failed `CRASH_LOOP` times in a row without becoming ready: the supervisor cannot keep the app
alive, and an orchestrator should restart the whole thing.

Signals. SIGTERM or SIGINT is passed on to every worker as SIGTERM (the workers run in their
own session, so a terminal's Ctrl-C reaches them once, through the supervisor); each finishes
its batch, commits and closes. The exit status is 0 when every running worker closed with
status 0, else 1. A worker whose supervisor dies (even by SIGKILL) notices its closed pipe and
stops itself.

HTTP. Workers serve their own HTTP on a port of the supervisor's host (loopback by default),
which the supervisor picks for each start; the supervisor serves the one address of `--http`
(`kstream.service.gateway`): health for the whole app, `/metrics` merged from every worker, and
every other request passed to a live worker, which routes key queries to the owning instance.

Why scrape and merge rather than prometheus_client's multiprocess mode: every kstream series
already carries `app_id` and `instance_id` and each worker has its own instance id, so the
union of the workers' pages is a valid page with every series distinct, as Prometheus would see
it scraping each worker. Multiprocess mode would need an environment variable set before
import, shared mmap files to clean up after crashed workers, and it does not carry the
collectors kstream reads at scrape time (state, assignment, lag, store sizes) nor the process
and GC collectors; counters of a dead worker would also have to be reconciled by hand.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, TextIO

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kstream.config import Config, app_state_dir, validate_app_id
from kstream.errors import ConfigError
from kstream.runtime.signals import graceful_signals
from kstream.runtime.state_lock import StateDirLock
from kstream.runtime.workers import parse_processes
from kstream.service.gateway import Gateway, WorkerView
from kstream.service.runner import DEFAULT_HTTP
from kstream.service.settings import Settings
from kstream.service.worker import BOOTSTRAP, WorkerSpec

log = logging.getLogger("kstream.service")

__all__ = ["CRASH_LOOP", "Supervisor", "config_mapping", "new_supervisor", "parse_processes"]

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
CRASH_LOOP = 5
"""Failures in a row, without the worker becoming ready in between, after which the
supervisor reports itself not live."""
_TICK_S = 0.1
_HEALTH_EVERY_S = 0.5
_STOP_MARGIN_S = 20.0
_DUMP_WAIT_S = 1.0  # for a worker's stack dump (SIGUSR1) before it is killed
"""Beyond `shutdown_timeout`, how long a worker may take to close its registry and HTTP."""


@dataclass
class _Slot:
    """Worker n: its current process (if any) and its history."""

    index: int
    instance_id: str
    state_dir: str
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    ready: bool = False
    restarts: int = 0
    failures: int = 0
    start_at: float = 0.0


class Supervisor:
    """Runs N worker processes of one app until told to stop (see the module docstring)."""

    def __init__(
        self,
        target_ref: str,
        settings: Settings,
        processes: int,
        *,
        log_level: str | None = None,
        log_format: str | None = None,
        state_lock: StateDirLock | None = None,
    ) -> None:
        """`state_lock`: the lock on `<state_dir>/<app_id>` when the caller holds it already
        (an App of N processes); otherwise `run()` takes it (kstream.runtime.state_lock)."""
        if not settings.app_id:
            raise ConfigError(
                "app_id is required: pass --app-id, set KSTREAM_APP_ID or put app_id in the "
                "config file"
            )
        validate_app_id(settings.app_id)
        if settings.engine != "native":
            raise ConfigError(
                f"processes: more than one process needs the native engine, not {settings.engine!r}"
            )
        self.app_id: str = settings.app_id
        self.processes = processes
        self.target_ref = target_ref
        self.settings = settings
        self.config = settings.engine_config()
        self.instance_id = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}"
        self.log_level, self.log_format = log_level, log_format
        host, _, port = (self.config.http or DEFAULT_HTTP).rpartition(":")
        self.host, self.port = host.strip("[]") or "0.0.0.0", int(port)
        base = os.path.join(app_state_dir(self.config.state_dir, self.app_id), "processes")
        self.slots = [
            _Slot(n, f"{self.instance_id}-{n}", os.path.join(base, str(n)))
            for n in range(processes)
        ]
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.state_lock = state_lock

    # --- the Fleet protocol of the gateway ---------------------------------------------------

    def workers(self) -> list[WorkerView]:
        with self._lock:
            return [
                WorkerView(
                    s.index,
                    s.instance_id,
                    s.url,
                    s.proc.pid if s.proc is not None else None,
                    s.proc is not None and s.proc.poll() is None,
                    s.ready,
                    s.restarts,
                )
                for s in self.slots
            ]

    def is_live(self) -> bool:
        with self._lock:
            return all(s.failures < CRASH_LOOP for s in self.slots)

    def is_ready(self) -> bool:
        return all(w.alive and w.ready for w in self.workers())

    def own_metrics(self) -> list[Metric]:
        views = self.workers()
        labels = ["app_id", "instance_id"]
        me = [self.app_id, self.instance_id]
        configured = GaugeMetricFamily(
            "kstream_supervisor_workers", "Worker processes the supervisor runs.", labels=labels
        )
        configured.add_metric(me, len(views))
        alive = GaugeMetricFamily(
            "kstream_supervisor_workers_alive",
            "Worker processes running right now.",
            labels=labels,
        )
        alive.add_metric(me, sum(w.alive for w in views))
        ready = GaugeMetricFamily(
            "kstream_supervisor_workers_ready",
            "Worker processes whose /health/ready answered 200 at the last check.",
            labels=labels,
        )
        ready.add_metric(me, sum(w.alive and w.ready for w in views))
        restarts = CounterMetricFamily(
            "kstream_supervisor_worker_restarts",
            "Restarts of each worker process after it died (instance_id is the worker's).",
            labels=["app_id", "instance_id", "supervisor"],
        )
        for w in views:
            restarts.add_metric([self.app_id, w.instance_id, self.instance_id], w.restarts)
        return [configured, alive, ready, restarts]

    # --- running ------------------------------------------------------------------------------

    def run(self, out: TextIO = sys.stdout) -> int:
        """Serve, start the workers, keep them running until `stop` or a signal; the exit
        status (0: every running worker closed cleanly).

        The app's state directory is locked first: a second supervisor, or a lone instance,
        on it is refused (StateDirLockedError) before anything is served or started.
        """
        own_lock = self.state_lock is None
        lock = self.state_lock or StateDirLock.acquire(self.config.state_dir, self.app_id)
        try:
            return self._run(out)
        finally:
            if own_lock:
                lock.release()

    def _run(self, out: TextIO) -> int:
        try:
            gateway = Gateway(self, self.host, self.port, token=self.config.http_token)
        except OSError as e:
            raise ConfigError(
                f"http: cannot listen on {self.host}:{self.port}: {e.strerror or e}"
            ) from None
        what = f"kstreamd supervisor of {self.app_id!r}"
        with graceful_signals(self.stop.set, what):
            gateway.start()
            health = threading.Thread(target=self._watch_health, name="kstream-health", daemon=True)
            try:
                for slot in self.slots:
                    self._spawn(slot)
                print(
                    f"kstreamd: app {self.app_id!r}: {self.processes} worker processes "
                    f"({self.settings.processing_guarantee}), serving {gateway.url}",
                    file=out,
                    flush=True,
                )
                health.start()
                while not self.stop.wait(_TICK_S):
                    self._tend()
            finally:
                failed = self._stop_workers()
                gateway.close()
        for slot, why in failed:
            print(
                f"kstreamd run: error: worker {slot.instance_id} did not close cleanly: {why}",
                file=sys.stderr,
                flush=True,
            )
        if failed:
            return 1
        print(f"kstreamd: app {self.app_id!r} stopped", file=out, flush=True)
        return 0

    def _tend(self) -> None:
        """Notice workers that died and start those whose backoff has passed."""
        now = time.monotonic()
        for slot in self.slots:
            proc = slot.proc
            if proc is not None and proc.poll() is not None:
                with self._lock:
                    slot.proc, slot.ready = None, False
                    slot.restarts += 1
                    slot.failures += 1
                    delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (slot.failures - 1))
                    slot.start_at = now + delay
                _close_pipe(proc)
                log.warning(
                    "worker %s (pid %d) %s; restart %d in %.1f s%s",
                    slot.instance_id,
                    proc.pid,
                    _describe_exit(proc.returncode),
                    slot.restarts,
                    delay,
                    f" ({slot.failures} failures in a row)" if slot.failures > 1 else "",
                )
            elif proc is None and now >= slot.start_at and not self.stop.is_set():
                self._spawn(slot)

    def _spawn(self, slot: _Slot) -> None:
        port = _free_port(self.host)
        spec = WorkerSpec(
            self.target_ref,
            slot.index,
            asdict(self._worker_settings(slot, port)),
            self.log_level,
            self.log_format,
        )
        line = spec.to_json() + "\n"
        proc = subprocess.Popen(
            [sys.executable, "-c", BOOTSTRAP, _json_path()],
            stdin=subprocess.PIPE,
            start_new_session=True,  # signals reach workers through the supervisor only
        )
        assert proc.stdin is not None
        try:
            proc.stdin.write(line.encode())
            proc.stdin.flush()  # the pipe stays open: its end tells the worker we are gone
        except OSError as e:
            log.warning("worker %s: passing its settings failed: %s", slot.instance_id, e)
        local = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        with self._lock:
            slot.proc, slot.ready = proc, False
            slot.url = f"http://[{local}]:{port}" if ":" in local else f"http://{local}:{port}"
        log.info("worker %s started (pid %d, %s)", slot.instance_id, proc.pid, slot.url)

    def _worker_settings(self, slot: _Slot, port: int) -> Settings:
        config = dict(self.settings.config)
        config["state_dir"] = slot.state_dir
        host = f"[{self.host}]" if ":" in self.host else self.host
        config["http"] = f"{host}:{port}"
        cache = config.get("cache_max_bytes")
        if isinstance(cache, int) and not isinstance(cache, bool) and cache > 0:
            # the record cache is divided among the stream threads, as Kafka divides
            # statestore.cache.max.bytes: here one thread per worker process
            config["cache_max_bytes"] = max(1, cache // self.processes)
        if config.get("group_instance_id"):
            # static membership: each worker a stable member id of its own, kept across its
            # restarts (its state directory is kept too), so a restart moves no task
            config["group_instance_id"] = f"{config['group_instance_id']}-{slot.index}"
        advertised = None
        if self.settings.advertised_url:
            parts = urllib.parse.urlsplit(self.settings.advertised_url)
            name = parts.hostname or "127.0.0.1"
            name = f"[{name}]" if ":" in name else name
            advertised = urllib.parse.urlunsplit(parts._replace(netloc=f"{name}:{port}"))
        return replace(
            self.settings,
            instance_id=slot.instance_id,
            advertised_url=advertised,
            config=config,
        )

    def _watch_health(self) -> None:
        """Keep each worker's readiness current; a ready worker's failure count starts over."""
        with ThreadPoolExecutor(max_workers=min(32, self.processes)) as pool:
            while not self.stop.wait(_HEALTH_EVERY_S):
                views = [w for w in self.workers() if w.alive]
                for view, ok in zip(views, pool.map(_is_ready, views), strict=True):
                    with self._lock:
                        slot = self.slots[view.index]
                        if slot.proc is None or slot.proc.pid != view.pid:
                            continue  # restarted meanwhile
                        if ok and not slot.ready:
                            log.info("worker %s is ready", slot.instance_id)
                        slot.ready = ok
                        if ok:
                            slot.failures = 0

    def _stop_workers(self) -> list[tuple[_Slot, str]]:
        """SIGTERM every running worker and wait for all; the ones that did not close well."""
        self.stop.set()
        running = [(s, s.proc) for s in self.slots if s.proc is not None]
        for slot, proc in running:
            if proc.poll() is None:
                log.info("worker %s: stopping (pid %d)", slot.instance_id, proc.pid)
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.shutdown_timeout / 1000 + _STOP_MARGIN_S
        failed: list[tuple[_Slot, str]] = []
        for slot, proc in running:
            try:
                code = proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _dump_stacks(slot, proc)
                proc.kill()
                proc.wait()
                failed.append((slot, "it did not stop in time and was killed"))
                continue
            finally:
                _close_pipe(proc)
            if code != 0:
                failed.append((slot, _describe_exit(code)))
            else:
                log.info("worker %s closed cleanly", slot.instance_id)
        return failed


def new_supervisor(
    target_ref: str,
    settings: Settings,
    processes: int,
    *,
    target: Any = None,
    log_level: str | None = None,
    log_format: str | None = None,
    stop: threading.Event | None = None,
    state_lock: StateDirLock | None = None,
) -> Supervisor:
    """The supervisor of `processes` workers of `target_ref` with `settings`, not started
    (`run` it): the one way in for `kstreamd run --processes`, `kstream.run_processes` and
    `App(config={"processes": N})` (kstream.processes).

    `target` is the already loaded target: when it is an App, its app id, servers, guarantee
    and config are the workers' settings (as `kstreamd run` uses an App as it is). `stop`, when
    set, stops the supervisor as its own `stop` does; `state_lock`: see `Supervisor`.
    """
    if target is not None and hasattr(target, "app_id") and hasattr(target, "start"):
        settings = replace(
            settings,
            app_id=target.app_id,
            bootstrap_servers=target.bootstrap_servers,
            processing_guarantee=target.processing_guarantee,
            config=config_mapping(target.config),
        )
    sup = Supervisor(
        target_ref,
        settings,
        processes,
        log_level=log_level,
        log_format=log_format,
        state_lock=state_lock,
    )
    if stop is not None:

        def relay() -> None:
            stop.wait()
            sup.stop.set()

        threading.Thread(target=relay, name="kstream-stop", daemon=True).start()
    return sup


def config_mapping(config: Config) -> dict[str, Any]:
    """`config` as the plain mapping the workers' settings carry (every key, JSON values)."""
    out = {f.name: getattr(config, f.name) for f in fields(config)}
    out["kafka"] = dict(config.kafka)
    return out


def _free_port(host: str) -> int:
    """A port free on `host` right now. Another process may take it before the worker binds
    it; the worker then fails to listen and is restarted on another port like any failure."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _json_path() -> str:
    import json

    return json.dumps([os.path.abspath(p) if p else os.getcwd() for p in sys.path])


def _is_ready(worker: WorkerView) -> bool:
    try:
        with urllib.request.urlopen(worker.url + "/health/ready", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _dump_stacks(slot: _Slot, proc: subprocess.Popen[bytes]) -> None:
    """Ask a worker that did not stop for its threads' stacks (it writes them to its stderr, the
    supervisor's), so the log says where its close hung."""
    log.error("worker %s did not stop in time: its threads' stacks follow", slot.instance_id)
    try:
        proc.send_signal(signal.SIGUSR1)
        proc.wait(_DUMP_WAIT_S)
    except subprocess.TimeoutExpired:
        pass
    except OSError:
        pass


def _close_pipe(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "is running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"

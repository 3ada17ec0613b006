"""A worker process of `kstreamd run --processes N`: one `kstreamd run` instance, started and
watched by `kstream.service.supervisor`.

The supervisor hands the worker its settings as one JSON line on standard input (settings may
hold secrets such as `http_token` or SASL passwords, which must not appear in the process
list) and keeps that pipe open. The worker imports the topology itself from its `MODULE:ATTR`
reference, because a topology holds user functions that need not pickle. When the pipe closes
without a word (the supervisor died, even by SIGKILL) the worker stops itself the graceful way,
so no worker outlives its supervisor.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from kstream.errors import ConfigError, KStreamError
from kstream.service.settings import Settings

log = logging.getLogger("kstream.service")

__all__ = ["BOOTSTRAP", "WorkerSpec", "main"]

BOOTSTRAP = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from kstream.service.worker import main; sys.exit(main())"
)
"""`python -c` program of a worker: the supervisor's `sys.path` first (passed as argv[1]), so
the worker imports exactly what the supervisor can, then `main()`."""


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker runs: the target reference, its own settings and the logging setup."""

    target: str
    index: int
    settings: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    log_format: str | None = None

    def to_json(self) -> str:
        try:
            return json.dumps(asdict(self), sort_keys=True)
        except (TypeError, ValueError) as e:
            raise ConfigError(
                f"config: a value cannot be passed to worker processes ({e}); use plain "
                "numbers, strings, booleans, lists and tables"
            ) from None

    @classmethod
    def from_json(cls, line: str) -> WorkerSpec:
        return cls(**json.loads(line))

    def service_settings(self) -> Settings:
        return Settings(**self.settings)


def _read_line(fd: int) -> str:
    """The first line on `fd`, read unbuffered (the pipe stays open after it)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data.decode()


def _stop_when_orphaned(fd: int) -> None:
    """Block until the supervisor's pipe closes, then stop this worker the graceful way.

    Raw reads, not `sys.stdin`: a daemon thread blocked inside a buffered reader would make
    the interpreter abort at exit.
    """
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    log.warning("worker %d: the supervisor has gone; stopping", os.getpid())
    os.kill(os.getpid(), signal.SIGTERM)


class _Tag(logging.Filter):
    """Puts the worker's instance id on its log records: `instance_id` in JSON lines, and
    in the logger name of text lines (workers share the supervisor's output)."""

    def __init__(self, instance_id: str, text: bool) -> None:
        super().__init__()
        self.instance_id, self.text = instance_id, text

    def filter(self, record: logging.LogRecord) -> bool:
        record.instance_id = self.instance_id
        if self.text and not record.name.endswith("]"):
            record.name = f"{record.name} [{self.instance_id}]"
        return True


def stop_before_serving(signum: int, frame: object) -> None:
    """SIGTERM or SIGINT before the service's own handlers are in place (the worker still
    reading its settings, importing its topology, building its app or asking the broker
    about its group): nothing was processed, so there is nothing to finish or commit, and the
    worker exits 0, as a graceful stop does. Left to the default action, the signal killed
    the worker, and a supervisor stopped a second after its start reported that worker as
    failed. `run_service` replaces this handler with the graceful one."""
    raise SystemExit(0)


def dump_stacks_on_request() -> None:
    """SIGUSR1 writes every thread's stack to stderr: the supervisor asks for it before it kills
    a worker that did not stop in time, so the log shows where the close hung."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def main() -> int:
    from kstream.service.logs import JsonFormatter, setup_logging
    from kstream.service.runner import run_service
    from kstream.service.target import load_target

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop_before_serving)
    fd = sys.stdin.fileno()
    line = _read_line(fd)
    if not line.strip():
        print("kstream worker: error: no settings on standard input", file=sys.stderr)
        return 2
    spec = WorkerSpec.from_json(line)
    dump_stacks_on_request()
    try:
        handler = setup_logging(spec.log_level, spec.log_format)
        if handler is not None:
            text = not isinstance(handler.formatter, JsonFormatter)
            handler.addFilter(_Tag(str(spec.settings.get("instance_id") or spec.index), text))
        threading.Thread(
            target=_stop_when_orphaned, args=(fd,), name="kstream-orphan", daemon=True
        ).start()
        target = load_target(spec.target)
        if hasattr(target, "app_id") and hasattr(target, "start"):
            target = target.topology  # settings come from the supervisor, not the App's
        return run_service(target, spec.service_settings())
    except ConfigError as e:
        print(f"kstream worker {spec.index}: error: {e}", file=sys.stderr, flush=True)
        return 2
    except KStreamError as e:
        print(f"kstream worker {spec.index}: error: {e}", file=sys.stderr, flush=True)
        return 1

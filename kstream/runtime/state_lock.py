"""The lock on an app's state directory, as Kafka Streams locks `<state.dir>/<application.id>`.

Two instances of one app on one state directory share its `process-id` file, so under
exactly_once_v2 they share one transactional id and fence each other for as long as both run;
they also write the same local stores. So an instance holds an exclusive lock on
`<state_dir>/<app_id>/.lock` while it runs (from `App.start`, or before `kstreamd run` serves
anything, until it closes) and a second one is refused with a ConfigError naming the directory
and the PID written in the lock file by its holder.

The lock is the operating system's (`flock`), not the file's existence: the kernel drops it
when the holder exits, however it exits (SIGKILL and power loss included), so the lock of a
dead process is taken over at once, without guessing from PIDs whether the holder still lives.
A `flock` also conflicts between two open files of one process, so two Apps of one process are
refused the same way. The file stays in place after a release (deleting it would let a process
that opened the old file hold a lock nobody else sees).

`kstreamd run --processes N`: the supervisor holds `<state_dir>/<app_id>`, and each worker runs
as a lone instance on its own state directory `<state_dir>/<app_id>/processes/<n>`, so it locks
`<state_dir>/<app_id>/processes/<n>/<app_id>`: workers of one supervisor never contend, while a
second supervisor, or a lone instance, on the same state directory is refused.
"""

from __future__ import annotations

import fcntl
import logging
import os
from types import TracebackType

from kstream.config import app_state_dir
from kstream.errors import ConfigError

log = logging.getLogger("kstream.runtime")

__all__ = ["LOCK_FILE", "StateDirLock", "StateDirLockedError", "lock_holder"]

LOCK_FILE = ".lock"


class StateDirLockedError(ConfigError):
    """Another running instance (another process, or another App of this one) holds the state
    directory: a setting to fix (one state_dir per instance), hence a ConfigError (exit 2)."""

    def __init__(self, directory: str, pid: int | None, app_id: str) -> None:
        self.directory, self.pid = directory, pid
        if pid is None:
            who = "a process that has not written its PID yet"
        elif pid == os.getpid():
            who = f"pid {pid} (this process: another App of app {app_id!r})"
        else:
            who = f"pid {pid}"
        super().__init__(
            f"state_dir: {directory} is locked by another instance of app {app_id!r}, {who} "
            f"(lock file {os.path.join(directory, LOCK_FILE)}); two instances on one state "
            "directory would share its process id and fence each other: stop that instance, "
            "or give each instance its own state_dir"
        )


def lock_holder(directory: str) -> int | None:
    """The PID written in `directory`'s lock file: its holder's, or that of a holder that ended
    without releasing it; None if there is none."""
    try:
        with open(os.path.join(directory, LOCK_FILE), encoding="ascii", errors="replace") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class StateDirLock:
    """An exclusive lock on one state directory, held until `release()` or the process ends."""

    def __init__(self, directory: str, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, state_dir: str, app_id: str) -> StateDirLock:
        """Lock `<state_dir>/<app_id>` (created if missing); StateDirLockedError if held."""
        return cls.at(app_state_dir(state_dir, app_id), app_id)

    @classmethod
    def at(cls, directory: str, app_id: str) -> StateDirLock:
        """Lock `directory` itself (created if missing); StateDirLockedError if held."""
        path = os.path.join(directory, LOCK_FILE)
        try:
            os.makedirs(directory, exist_ok=True)
            # O_CLOEXEC: a process this one starts must not inherit (and keep) the lock
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise ConfigError(
                f"state_dir: cannot create or write {path!r} ({e.strerror or e}); expected a "
                "writable directory"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateDirLockedError(directory, lock_holder(directory), app_id) from None
        except OSError as e:
            os.close(fd)
            raise ConfigError(
                f"state_dir: cannot lock {path!r} ({e.strerror or e}); the state directory "
                "must be on a file system that supports locks"
            ) from None
        previous = lock_holder(directory)  # a clean release leaves no PID behind
        if previous is not None:
            log.info(
                "state directory %s: took over the lock of pid %d, which ended without "
                "releasing it",
                directory,
                previous,
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Clear the PID and let the lock go (closing the file releases it); idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)

    def __enter__(self) -> StateDirLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except OSError:
            pass

"""Failed writes of local state in an operator's words: which device is full, and where.

LMDB reports a full disk by its errno alone: "mdb_txn_commit: No space left on device"
(ENOSPC), or, from some filesystems and from the fsync that ends a commit, "Input/output
error" (EIO), which reads like failing hardware. Neither names the directory. `describe`
turns such an error into one line that names the directory holding the state (`state_dir`,
or the LMDB root of the backend URL) and the space left on its device, so the operator knows
what to free or where to move the state.
"""

from __future__ import annotations

import errno
import os

LOW_SPACE = 1 << 20
"""Below this many free bytes, an I/O error on a write is taken for a full device."""

_NO_SPACE = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))
_IO = os.strerror(errno.EIO)


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on the device holding `path` (the nearest
    existing ancestor when `path` does not exist yet); None if it cannot be told."""
    p = os.path.abspath(path)
    while True:
        try:
            st = os.statvfs(p)
            return st.f_bavail * st.f_frsize
        except OSError:
            parent = os.path.dirname(p)
            if parent == p:
                return None
            p = parent


def _size(n: int | None) -> str:
    if n is None:
        return "an unknown amount"
    if n < 1 << 10:
        return f"{n} bytes"
    if n < 1 << 20:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n / (1 << 20):.1f} MiB"


def _is(e: BaseException, codes: tuple[int, ...], texts: tuple[str, ...]) -> bool:
    if isinstance(e, OSError) and e.errno in codes:
        return True
    text = str(e)
    return any(t in text for t in texts)


def describe(e: BaseException, holder: str, path: str) -> str | None:
    """The cause of a failed write at `path` as an operator reads it, or None when `e` is not
    about the device (then the caller keeps its own message).

    `holder` names what the operator configured, e.g. "state_dir (/var/lib/kstream)".
    """
    free = free_bytes(path)
    if type(e).__name__ == "DiskError" or _is(e, (errno.ENOSPC, errno.EDQUOT), _NO_SPACE):
        return f"no space left on the device holding {holder}: {_size(free)} free"
    if _is(e, (errno.EIO,), (_IO,)):
        if free is not None and free < LOW_SPACE:
            return (
                f"no space left on the device holding {holder}: {_size(free)} free (reported "
                "as an input/output error)"
            )
        return f"input/output error on the device holding {holder} ({_size(free)} free)"
    return None


def allocate(path: str) -> None:
    """Give every byte of the file at `path` a block on its device now (posix_fallocate over
    its size; the size does not change). A file written through a shared memory map (LMDB's
    lock table) must not have holes: on a full device, the first write into a hole kills the
    process with SIGBUS instead of failing. Raises OSError (ENOSPC) when the device cannot;
    a filesystem without fallocate is left as it is."""
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                    return
                raise
    finally:
        os.close(fd)

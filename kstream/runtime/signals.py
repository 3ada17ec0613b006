"""Stopping cleanly on SIGTERM and SIGINT: `graceful_signals`, used by `App.run`, the worker
processes' supervisor and `kstreamd run`."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger("kstream.runtime")

__all__ = ["graceful_signals"]


@contextlib.contextmanager
def graceful_signals(stop: Callable[[], None], what: str) -> Iterator[None]:
    """SIGTERM and SIGINT while the block runs: the first calls `stop` (finish the batch,
    commit, close); a second one is logged and ignored, because orchestrators and impatient
    users often send two and the clean close must not be cut short; a third aborts the
    process the default way (exit status 128 + signal number).

    Only the main thread can install handlers; elsewhere the block runs without them.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = 0

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal received
        received += 1
        if received == 1:
            log.info("%s: signal %d, shutting down", what, signum)
            # On a thread of its own: the handler runs in the main thread between two
            # bytecodes, possibly while that thread holds the lock of the very Event `stop`
            # sets (inside `stop_event.wait()`), which would then deadlock (seen once: a
            # worker that never stopped).
            threading.Thread(target=stop, name="kstream-stop", daemon=True).start()
        elif received == 2:
            log.warning(
                "%s: signal %d during shutdown; finishing the clean close (send it once more "
                "to abort)",
                what,
                signum,
            )
        else:
            log.error("%s: signal %d again; aborting without a clean close", what, signum)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

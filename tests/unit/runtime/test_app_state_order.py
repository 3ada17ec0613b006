"""An app's own reactions to its state (metrics, the slow-rebalance watch) run in the order of
the moves, whichever threads move it: a REBALANCING from the stream thread whose reaction is
still running when `close()` on another thread moves on must not react after the close."""

from __future__ import annotations

import threading

from kstream.runtime.app_state import AppState, AppStates


def test_a_move_racing_a_slow_reaction_reacts_after_it() -> None:
    reactions: list[AppState] = []
    in_reaction, release = threading.Event(), threading.Event()

    def changed(new: AppState) -> None:
        if new == AppState.REBALANCING:
            in_reaction.set()
            assert release.wait(30)
        reactions.append(new)

    states = AppStates("app", changed)
    stream_thread = threading.Thread(target=states.move, args=(AppState.REBALANCING,))
    stream_thread.start()
    assert in_reaction.wait(30)
    # close() on this thread while the stream thread still reacts to REBALANCING
    closer = threading.Thread(target=states.move, args=(AppState.PENDING_SHUTDOWN,))
    closer.start()
    closer.join(0.5)  # before the fix it had reacted by now; with it, it waits its turn
    release.set()
    stream_thread.join(30)
    closer.join(30)
    assert reactions == [AppState.REBALANCING, AppState.PENDING_SHUTDOWN]
    assert states.state == AppState.PENDING_SHUTDOWN

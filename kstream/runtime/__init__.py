"""The micro-batch runtime: `App`, the stream thread, commit protocols, restore, global tables."""

from kstream.runtime.app import App, AppState, LocalStore
from kstream.runtime.reader import TopicReader, caught_up, read_unique

__all__ = ["App", "AppState", "LocalStore", "TopicReader", "caught_up", "read_unique"]

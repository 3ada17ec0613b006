"""`KGroupedTable`: a table re-grouped by a new key, aggregated with an adder and a subtractor.

The class is defined in `kstream.dsl.api` beside `KTable`, which it is bound to; its operators
and how a row moves between groups are in `kstream.dsl.grouped_table_ops`. This module keeps
the import path `kstream.dsl.grouped_table.KGroupedTable`.
"""

from kstream.dsl.api import KGroupedTable

__all__ = ["KGroupedTable"]

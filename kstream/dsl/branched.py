"""`KStream.split()`: Kafka Streams 4's `BranchedKStream`, branches named and chained by `Branched`.

`BranchedKStream` is defined in `kstream.dsl.api` beside `KStream`, which it is bound to; its
operators and `Branched` are in `kstream.dsl.branched_ops`. This module keeps the import paths
`kstream.dsl.branched.Branched` and `kstream.dsl.branched.BranchedKStream`.
"""

from kstream.dsl.api import BranchedKStream
from kstream.dsl.branched_ops import Branched

__all__ = ["Branched", "BranchedKStream"]

"""`KStream.split()`: Kafka Streams 4's `BranchedKStream`, branches named and chained by `Branched`.

The splitter processor is added when `split()` is called and each branch's pass-through child
when `branch` (or `default_branch`) is called, with the names Kafka gives them
(`BranchedKStreamImpl`), so that a topology split the Kafka way describes as Kafka's does and
keeps its internal topic names when ported.

The splitter's operators are here (`BranchedOps`, generic in the stream class it splits);
`kstream.dsl.api.BranchedKStream` binds it to `KStream`, so the class users name is annotated
bare (and importable from `kstream.dsl.branched`, with `Branched`, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from kstream.dsl import processors as p
from kstream.dsl.graph import processor_factory
from kstream.dsl.handles import StreamT
from kstream.errors import TopologyError


@dataclass(frozen=True)
class Branched:
    """How one branch of `KStream.split()` is named and what is done with it (Kafka's
    `Branched`).

    The branch's key in the dict `default_branch`/`no_default_branch` return, and its node's
    name, is the split's name followed by `name` (without a name: by the branch's position,
    from 1, or 0 for the default branch). `function` is applied to the branch at once and its
    result is what the dict holds (a None result: the branch is left out); with `consumer` the
    branch is handed over and left out of the dict.

    Example:
        >>> from kstream.dsl import Branched
        >>> split = StreamBuilder().stream("orders", "str", "json").split("orders-")
        >>> branches = (
        ...     split.branch(lambda k, v: v["eu"], Branched.as_("eu"))
        ...     .branch(lambda k, v: v["test"], Branched.with_consumer(lambda s: s.to("test")))
        ...     .default_branch(Branched.with_function(lambda s: s.to("rest")))
        ... )
        >>> list(branches)  # a consumed branch, and one whose function gave None: left out
        ['orders-eu']
    """

    name: str | None = None
    # the branch is a `KStream` (typed Any here: this module sits below the class)
    function: Callable[[Any], Any] | None = None
    consumer: Callable[[Any], Any] | None = None

    @staticmethod
    def as_(name: str) -> Branched:
        """A branch named `name` (Kafka's `Branched.as`).

        Example:
            >>> from kstream.dsl import Branched
            >>> split = StreamBuilder().stream("orders").split("o-")
            >>> list(split.branch(lambda k, v: True, Branched.as_("all")).no_default_branch())
            ['o-all']
        """
        return Branched(name=name)

    @staticmethod
    def with_function(function: Callable[[Any], Any], name: str | None = None) -> Branched:
        """A branch whose dict entry is `function(branch)`: chain its operators inline.

        Example:
            >>> from kstream.dsl import Branched
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> twice = Branched.with_function(lambda s: s.map_values(lambda v: 2 * v), "x2")
            >>> parts = b.stream("in", "str", "long").split("s-").branch(lambda k, v: v > 0, twice)
            >>> parts.no_default_branch()["s-x2"].to("out", "str", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("in", "str", "long").pipe_many([("a", 1), ("b", -1)])
            ...     d.output_topic("out", "str", "long").read_values()
            [2]
        """
        return Branched(name=name, function=function)

    @staticmethod
    def with_consumer(consumer: Callable[[Any], Any], name: str | None = None) -> Branched:
        """A branch handed to `consumer(branch)` and left out of the dict (a terminal branch).

        Example:
            >>> from kstream.dsl import Branched
            >>> split = StreamBuilder().stream("orders", "str", "str").split()
            >>> to_test = Branched.with_consumer(lambda s: s.to("test-orders"))
            >>> split.branch(lambda k, v: v == "test", to_test).no_default_branch()
            {}
        """
        return Branched(name=name, consumer=consumer)


#: the splitter class a stream's `split` makes (`kstream.dsl.api` binds it)
BranchedT = TypeVar("BranchedT", bound="BranchedOps[Any]")


class BranchedOps(Generic[StreamT]):
    """`BranchedKStream`'s operators. The stream being split (of the class `StreamT`): add
    branches with `branch`, finish with `default_branch` or `no_default_branch`, which return
    the branches by name (Kafka 4's `BranchedKStream`).

    A record goes to the first branch whose predicate holds; records matching none go to the
    default branch, or are dropped without one. Keys are unchanged: a branch repartitions
    before a stateful operator only if the split stream would have.

    Example:
        >>> from kstream.dsl import Branched
        >>> from kstream.testing import TopologyTestDriver
        >>> b = StreamBuilder()
        >>> split = b.stream("s", "str", "long").split("s-")
        >>> parts = split.branch(lambda k, v: v > 0, Branched.as_("pos")).default_branch()
        >>> parts["s-pos"].to("positive"); parts["s-0"].to("others")
        >>> with TopologyTestDriver(b) as d:
        ...     d.input_topic("s", "str", "long").pipe_many([("a", 1), ("b", -1)])
        ...     d.output_topic("others", "str", "long").read_key_values()
        [('b', -1)]
    """

    def __init__(self, source: StreamT, name: str | None) -> None:
        b = source._builder
        self._source = source
        self._name = b.name("BRANCH", name)
        # filled as branches are added; the processor reads them when a task builds it
        self._predicates: list[Callable[[Any, Any], Any]] = []
        self._children: list[str] = []
        self._branches: dict[str, StreamT] = {}
        self._done = False
        factory = processor_factory(p.BranchProcessor, self._predicates, self._children, None)
        b.processor(self._name, factory, source._node)

    def branch(
        self, predicate: Callable[[Any, Any], Any], branched: Branched | None = None
    ) -> Self:
        """Add a branch taking the records `predicate(key, value)` holds for (that no earlier
        branch took); returns this splitter, to chain the next branch.

        Example:
            >>> s = StreamBuilder().stream("s", "str", "long")
            >>> parts = s.split().branch(lambda k, v: v > 0).branch(lambda k, v: v < 0)
            >>> list(parts.no_default_branch())
            ['KSTREAM-BRANCH-00000000011', 'KSTREAM-BRANCH-00000000012']
        """
        self._check_open()
        self._predicates.append(predicate)
        self._add(branched or Branched(), len(self._predicates))
        return self

    def default_branch(self, branched: Branched | None = None) -> dict[str, StreamT]:
        """Add the branch of the records no predicate took, and return the branches by name.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> split = b.stream("s", "str", "long").split("s-").branch(lambda k, v: v > 0)
            >>> split.default_branch()["s-0"].to("rest")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("s", "str", "long").pipe_many([("a", 1), ("b", -1)])
            ...     d.output_topic("rest", "str", "long").read_key_values()
            [('b', -1)]
        """
        self._check_open()
        self._add(branched or Branched(), 0)
        self._done = True
        return dict(self._branches)

    def no_default_branch(self) -> dict[str, StreamT]:
        """Return the branches by name; records no predicate took are dropped.

        Example:
            >>> from kstream.dsl import Branched
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> split = b.stream("s", "str", "long").split("s-")
            >>> parts = split.branch(lambda k, v: v > 9, Branched.as_("big")).no_default_branch()
            >>> parts["s-big"].to("big")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("s", "str", "long").pipe_many([("a", 10), ("b", 1)])
            ...     d.output_topic("big", "str", "long").read_key_values()
            [('a', 10)]
        """
        self._check_open()
        self._done = True
        return dict(self._branches)

    def _check_open(self) -> None:
        if self._done:
            raise TopologyError(f"split {self._name!r}: the default branch was already chosen")

    def _add(self, branched: Branched, index: int) -> None:
        src, b = self._source, self._source._builder
        child = self._name + (branched.name if branched.name is not None else str(index))
        self._children.append(child)
        b.name("BRANCHCHILD")  # Kafka takes an index for each branch child
        b.processor(child, p.PassThroughProcessor, self._name)
        stream = type(src)(b, child, src._key_serde, src._value_serde, src._repartition_required)
        if branched.function is not None:
            result = branched.function(stream)
            if result is not None:
                self._branches[child] = result
        elif branched.consumer is not None:
            branched.consumer(stream)
        else:
            self._branches[child] = stream

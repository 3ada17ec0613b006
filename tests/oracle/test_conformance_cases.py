"""The hand-written conformance cases, judged by Kafka Streams itself.

tests/conformance holds cases ported by hand from Kafka Streams' tests, each with an answer
written by hand. tests/oracle/conformance_cases.py expresses every one the spec format can
express as a spec and its input (its id names the conformance test and the Kafka test it
mirrors); here each runs on both sides, and kstream's outputs and stores must equal Kafka
Streams' (tests/oracle/compare.py), the same check as the generated cases'.
"""

from __future__ import annotations

import pytest

from oracle.conformance_cases import CASES
from oracle.harness import Oracle
from oracle.spec import Case
from oracle.test_oracle import check


@pytest.mark.parametrize("case", CASES)
def test_conformance_case_gives_kafka_streams_answers(oracle: Oracle, case: Case) -> None:
    check(oracle, case)

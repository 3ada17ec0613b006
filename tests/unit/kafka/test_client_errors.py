"""Connection and configuration errors of the Kafka clients, without a broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kstream.errors import (
    BrokerUnreachableError,
    ConfigError,
    KafkaClientError,
    ProduceError,
    ProducerFencedError,
    TopicError,
)
from kstream.kafka import Admin, Consumer, Producer
from kstream.kafka.broker import free_port
from kstream.kafka.errors import (
    AuthenticationError,
    FatalTransactionError,
    TransactionAbortableError,
    map_error,
)


@pytest.mark.timeout(60)  # librdkafka alone would retry forever
@pytest.mark.parametrize("client", [Admin, Producer, Consumer])
def test_unreachable_bootstrap_fails_in_bounded_time_naming_the_address(client: type) -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(BrokerUnreachableError) as e:
        client(address, connect_timeout="1s")
    msg = str(e.value)
    assert msg.startswith(f"{client.__name__}: Kafka at {address!r} did not answer within 1s")
    assert "Connection refused" in msg
    assert e.value.retriable is True


@pytest.mark.timeout(60)
def test_unresolvable_host_is_named() -> None:
    with pytest.raises(BrokerUnreachableError) as e:
        Producer("no-such-host.invalid:9092", connect_timeout=(1500, "milliseconds"))
    assert str(e.value).startswith(
        "Producer: Kafka at 'no-such-host.invalid:9092' did not answer within 1.5s"
    )


def test_missing_ca_file_is_a_config_error_before_connecting() -> None:
    with pytest.raises(ConfigError) as e:
        Consumer(
            "127.0.0.1:1",
            kafka={"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
        )
    assert str(e.value) == "kafka['ssl.ca.location']: file not found: '/nonexistent/ca.pem'"


def test_sasl_without_credentials_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as e:
        Producer("127.0.0.1:1", kafka={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    assert str(e.value) == (
        "kafka['sasl.username'] is required with security.protocol=SASL_SSL "
        "and sasl.mechanism=PLAIN"
    )


def test_callbacks_cannot_be_overridden() -> None:
    with pytest.raises(ConfigError) as e:
        Producer("127.0.0.1:1", kafka={"error_cb": print})
    assert str(e.value) == (
        "kafka: error_cb cannot be set here; kstream installs its own callbacks to surface errors"
    )


def test_invalid_librdkafka_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as e:
        Producer("127.0.0.1:1", kafka={"no.such.setting": 1})
    assert str(e.value).startswith("Producer: invalid kafka settings: ")
    assert "no.such.setting" in str(e.value)


def test_bad_connect_timeout_and_bootstrap() -> None:
    with pytest.raises(ConfigError, match="connect_timeout: cannot parse duration 'soon'"):
        Producer("127.0.0.1:1", connect_timeout="soon")
    with pytest.raises(ConfigError, match=r"^Admin: bootstrap_servers: expected HOST:PORT"):
        Admin("", connect_timeout=100)
    with pytest.raises(ConfigError, match=r"^Consumer: bootstrap_servers: '127.0.0.1:notaport'"):
        Consumer("127.0.0.1:notaport")


def test_transaction_calls_need_a_transactional_id() -> None:
    # Constructing needs a broker; the check itself does not, so call it unbound.
    p = Producer.__new__(Producer)
    p.transactional_id = None
    with pytest.raises(ConfigError, match=r"Producer.begin: this producer has no transactional_id"):
        p.begin()


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (KafkaError._TRANSPORT, BrokerUnreachableError),
        (KafkaError._ALL_BROKERS_DOWN, BrokerUnreachableError),
        (KafkaError._SSL, AuthenticationError),
        (KafkaError.SASL_AUTHENTICATION_FAILED, AuthenticationError),
        (KafkaError.PRODUCER_FENCED, ProducerFencedError),
        (KafkaError._FENCED, ProducerFencedError),
        (KafkaError.TOPIC_ALREADY_EXISTS, TopicError),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, TopicError),
        (KafkaError.MSG_SIZE_TOO_LARGE, ProduceError),
        (KafkaError._MSG_TIMED_OUT, ProduceError),
        (KafkaError.REBALANCE_IN_PROGRESS, KafkaClientError),
    ],
)
def test_error_codes_map_to_kstream_exceptions(code: int, cls: type) -> None:
    exc = map_error(KafkaException(KafkaError(code)), "doing X")
    assert type(exc) is cls
    assert str(exc).startswith(f"doing X: {KafkaError(code).name()}: ")
    assert exc.code == KafkaError(code).name()


def test_transactional_errors_are_classified() -> None:
    abortable = KafkaError(KafkaError._STATE, "needs abort", txn_requires_abort=True)
    assert type(map_error(abortable, "c", transactional=True)) is TransactionAbortableError
    timeout = KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True)
    assert type(map_error(timeout, "c", transactional=True)) is FatalTransactionError
    fatal = KafkaError(KafkaError.INVALID_TXN_STATE, "bad", fatal=True)
    assert type(map_error(fatal, "c", transactional=True)) is FatalTransactionError
    fenced = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    exc = map_error(fenced, "committing", transactional=True)
    assert type(exc) is ProducerFencedError
    assert "a newer producer with the same transactional.id took over" in str(exc)

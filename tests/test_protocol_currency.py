"""Current clients negotiate their highest versions with replog, and do not fall back.

``LIBRDKAFKA_MAX`` is the highest version librdkafka 2.16 (confluent-kafka's bundled
library) asks for, per API, taken from its sources (``rd_kafka_broker_ApiVersion_supported``
calls in rdkafka_request.c, rdkafka_msgset_writer.c, rdkafka_fetcher.c and
rdkafka_admin.c) for the APIs replog implements. The broker must offer at least that,
and librdkafka's own ``debug=protocol`` log must show it sending that version.
"""

from __future__ import annotations

import logging
import re
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from replog.cluster.launcher import LocalCluster
from replog.protocol import apis
from replog.protocol.apis import ApiKey

LIBRDKAFKA_MAX = {
    ApiKey.PRODUCE: 10,
    ApiKey.FETCH: 16,
    ApiKey.LIST_OFFSETS: 7,
    ApiKey.METADATA: 13,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 4,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 2,
    ApiKey.DESCRIBE_CONFIGS: 1,
}

# librdkafka's request names in its protocol debug log ("Sent ProduceRequest (v10, ...").
_SENT = re.compile(r"Sent (?P<name>[A-Za-z]+)Request \(v(?P<version>\d+),")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _logger(name: str) -> tuple[logging.Logger, _Lines]:
    logger = logging.getLogger(f"replog-tests.librdkafka.{name}.{uuid.uuid4().hex[:6]}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = _Lines()
    logger.addHandler(handler)
    return logger, handler


def sent_versions(lines: list[str]) -> dict[str, set[int]]:
    sent: dict[str, set[int]] = {}
    for line in lines:
        for m in _SENT.finditer(line):
            sent.setdefault(m["name"], set()).add(int(m["version"]))
    return sent


def test_broker_offers_what_librdkafka_asks_for() -> None:
    served = apis.supported_versions()
    short = {
        ApiKey(key).name: (served.get(key), wanted)
        for key, wanted in LIBRDKAFKA_MAX.items()
        if served.get(key, (0, -1))[1] < wanted
    }
    assert not short, f"(served, librdkafka's highest) for APIs served below it: {short}"


@pytest.fixture(scope="module")
def bootstrap(replog_broker: LocalCluster) -> str:
    return replog_broker.bootstrap_servers()


def test_librdkafka_sends_its_highest_versions(bootstrap: str) -> None:
    topic = f"currency-{uuid.uuid4().hex[:6]}"
    admin_log, admin_lines = _logger("admin")
    admin = AdminClient({"bootstrap.servers": bootstrap, "debug": "protocol", "logger": admin_log})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=60)
    admin.poll(1)  # logs reach the logger when the client is polled

    producer_log, producer_lines = _logger("producer")
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "debug": "protocol",
            "logger": producer_log,
        }
    )
    for i in range(20):
        producer.produce(topic, key=f"k{i}".encode(), value=b"v", partition=i % 2)
    assert producer.flush(60) == 0

    consumer_log, consumer_lines = _logger("consumer")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "currency",
            "enable.auto.commit": False,
            "debug": "protocol",
            "logger": consumer_log,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        got = 0
        while got < 20:
            message = consumer.poll(10)
            assert message is not None, f"consumed {got} of 20"
            assert message.error() is None, message.error()
            got += 1
        low_high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
        assert low_high == (0, 10)
    finally:
        consumer.close()

    sent = sent_versions(admin_lines.lines + producer_lines.lines + consumer_lines.lines)
    served = apis.supported_versions()
    expected = {
        "Produce": min(LIBRDKAFKA_MAX[ApiKey.PRODUCE], served[ApiKey.PRODUCE][1]),
        "Fetch": min(LIBRDKAFKA_MAX[ApiKey.FETCH], served[ApiKey.FETCH][1]),
        "Metadata": min(LIBRDKAFKA_MAX[ApiKey.METADATA], served[ApiKey.METADATA][1]),
        "ListOffsets": min(LIBRDKAFKA_MAX[ApiKey.LIST_OFFSETS], served[ApiKey.LIST_OFFSETS][1]),
        "InitProducerId": min(
            LIBRDKAFKA_MAX[ApiKey.INIT_PRODUCER_ID], served[ApiKey.INIT_PRODUCER_ID][1]
        ),
        "CreateTopics": min(LIBRDKAFKA_MAX[ApiKey.CREATE_TOPICS], served[ApiKey.CREATE_TOPICS][1]),
    }
    actual = {name: sent.get(name) for name in expected}
    assert actual == {name: {version} for name, version in expected.items()}, sent

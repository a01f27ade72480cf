"""A consume-transform-produce loop in a process of its own, for
``test_transaction_clients.py``: it copies every record of ``--input`` to ``--output``
(value prefixed with ``out-``), one transaction per poll, committing the consumed
offsets with ``send_offsets_to_transaction`` (KIP-447). It prints ``committed N`` after
each commit (N: records copied so far by this process) and exits 0 once its positions
reached ``--ends`` (``partition:offset,...``, the input's end offsets).

Run: ``python tests/txn_ctp_child.py BOOTSTRAP --input T --output T --group G
--transactional-id ID --ends 0:100,1:100``
"""

from __future__ import annotations

import argparse
import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--ends", required=True)
    args = parser.parse_args()
    ends = {int(p): int(o) for p, o in (item.split(":") for item in args.ends.split(","))}

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            # static membership: a restarted copy takes the killed one's place at once
            "group.instance.id": f"{args.group}-worker",
            "session.timeout.ms": 10000,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(60)
    consumer.subscribe([args.input])
    copied = 0
    try:
        while True:
            assignment = consumer.assignment()
            if assignment and len(assignment) == len(ends):
                positions = consumer.position(assignment)
                if all(tp.offset >= ends[tp.partition] for tp in positions):
                    return 0
            msgs = [m for m in consumer.consume(num_messages=7, timeout=0.5) if not m.error()]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(args.output, key=m.key(), value=b"out-" + m.value())
            offsets = [
                TopicPartition(tp.topic, tp.partition, tp.offset)
                for tp in consumer.position(consumer.assignment())
            ]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(60)
            copied += len(msgs)
            print(f"committed {copied}", flush=True)
    except KafkaException as exc:
        print(f"error {exc}", flush=True)
        return 1
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())

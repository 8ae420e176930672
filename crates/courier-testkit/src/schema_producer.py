"""Writes records the way real Kafka producers do through a Schema Registry:
confluent-kafka's own AvroSerializer (it registers the schema under
`<topic>-value` and frames each record: magic byte 0, the schema id, the Avro
binary), then confluent-kafka's Producer (idempotent, acks=all).

Reads one JSON document from stdin:
  {"brokers": "...", "registry": "http://...", "topic": "...",
   "batches": [{"schema": "<Avro schema JSON text>",
                "records": [{"partition": 0, "key": "k" | null, "value": {...}}]}]}
Values are JSON; where the schema says `decimal` the value is a string of digits
(turned into decimal.Decimal), where it says `bytes` or `fixed` a hex string.
Prints one JSON line per record, in order: {"partition", "offset", "schema_id"}.
"""

import decimal
import json
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

PRIMITIVE = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def convert(value, schema, names):
    if isinstance(schema, list):
        if value is None:
            return None
        branch = next(b for b in schema if b != "null")
        return convert(value, branch, names)
    if isinstance(schema, str):
        if schema == "bytes":
            return bytes.fromhex(value)
        if schema in PRIMITIVE:
            return value
        return convert(value, names[schema], names)
    kind = schema["type"]
    if "name" in schema:
        names[schema["name"]] = schema
        if "namespace" in schema:
            names[schema["namespace"] + "." + schema["name"]] = schema
    if schema.get("logicalType") == "decimal":
        return decimal.Decimal(value)
    if kind == "record":
        return {f["name"]: convert(value.get(f["name"]), f["type"], names) for f in schema["fields"]}
    if kind in ("bytes", "fixed"):
        return bytes.fromhex(value)
    if kind == "array":
        return [convert(v, schema["items"], names) for v in value]
    if kind == "map":
        return {k: convert(v, schema["values"], names) for k, v in value.items()}
    return value


def main():
    spec = json.load(sys.stdin)
    registry = SchemaRegistryClient({"url": spec["registry"]})
    producer = Producer({
        "bootstrap.servers": spec["brokers"],
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    })
    topic = spec["topic"]
    results = []

    def delivered(err, msg):
        if err is not None:
            raise SystemExit("delivery failed: %s" % err)
        results.append((msg.partition(), msg.offset(), int.from_bytes(msg.value()[1:5], "big")))

    for batch in spec["batches"]:
        schema_text = batch["schema"]
        serializer = AvroSerializer(registry, schema_text, conf={"auto.register.schemas": True})
        parsed = json.loads(schema_text)
        for r in batch["records"]:
            value = convert(r["value"], parsed, {})
            data = serializer(value, SerializationContext(topic, MessageField.VALUE))
            kwargs = {"value": data, "on_delivery": delivered}
            if r.get("partition") is not None:
                kwargs["partition"] = r["partition"]
            if r.get("key") is not None:
                kwargs["key"] = r["key"]
            producer.produce(topic, **kwargs)
            producer.poll(0)
        # Acknowledged before the next batch: offsets follow batch order.
        if producer.flush(60) != 0:
            raise SystemExit("records left unacknowledged after 60 s")
    for p, o, i in results:
        print(json.dumps({"partition": p, "offset": o, "schema_id": i}))


if __name__ == "__main__":
    main()

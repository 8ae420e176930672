"""Writes records the way real Kafka producers do through a Schema Registry,
for tests/schema_formats.rs: confluent-kafka's own ProtobufSerializer (it
registers the .proto file and the files it imports under their names, and
frames each record: magic byte 0, the schema id, the message-index list, the
message) or JSONSerializer (magic byte 0, the schema id, the JSON text), then
confluent-kafka's Producer (idempotent, acks=all).

Reads one JSON document from stdin:
  {"brokers": "...", "registry": "http://...", "topic": "...",
   "proto_dir": "<dir of .proto files>", "proto_file": "order.proto",
   "batches": [
     {"message": "Order" | "Refund.Reason",          # Protobuf: the message type
      "records": [{"partition": 0, "key": "k" | null, "value": {...}}]},
     {"schema": "<JSON Schema text>",                 # JSON Schema
      "references": [{"name": "money.json", "subject": "money-json", "schema": "..."}],
      "records": [...]}]}
Protobuf values are the message in proto3 JSON (json_format.ParseDict).
Prints one JSON line per record, in order: {"partition", "offset", "schema_id"}.
"""

import importlib
import json
import os
import sys
import tempfile

from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import json_format
from grpc_tools import protoc


def proto_module(proto_dir, proto_file):
    """The generated Python module of `proto_file` (and of what it imports)."""
    out = tempfile.mkdtemp(prefix="courier-proto-")
    files = [f for f in os.listdir(proto_dir) if f.endswith(".proto")]
    args = ["protoc", "-I" + proto_dir, "-I" + os.path.join(os.path.dirname(protoc.__file__), "_proto"),
            "--python_out=" + out] + files
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed on %s" % proto_dir)
    sys.path.insert(0, out)
    return importlib.import_module(proto_file[: -len(".proto")] + "_pb2")


def message_class(module, path):
    cls = module
    for part in path.split("."):
        cls = getattr(cls, part)
    return cls


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
    ctx = SerializationContext(topic, MessageField.VALUE)
    module = proto_module(spec["proto_dir"], spec["proto_file"]) if "proto_dir" in spec else None
    results = []

    def delivered(err, msg):
        if err is not None:
            raise SystemExit("delivery failed: %s" % err)
        results.append((msg.partition(), msg.offset(), int.from_bytes(msg.value()[1:5], "big")))

    for batch in spec["batches"]:
        if "message" in batch:
            cls = message_class(module, batch["message"])
            serializer = ProtobufSerializer(cls, registry, {"auto.register.schemas": True})

            def encode(value, cls=cls, serializer=serializer):
                return serializer(json_format.ParseDict(value, cls()), ctx)
        else:
            refs = []
            for r in batch.get("references", []):
                referenced = Schema(r["schema"], "JSON")
                registry.register_schema(r["subject"], referenced)
                version = registry.lookup_schema(r["subject"], referenced).version
                refs.append(SchemaReference(r["name"], r["subject"], version))
            schema = Schema(batch["schema"], "JSON", refs)
            registry.register_schema(topic + "-value", schema)
            serializer = JSONSerializer(schema, registry, conf={"auto.register.schemas": False, "use.latest.version": True})

            def encode(value, serializer=serializer):
                return serializer(value, ctx)
        for r in batch["records"]:
            kwargs = {"value": encode(r["value"]), "on_delivery": delivered}
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

#!/usr/bin/env bash
# Creates (once) the Python virtualenv of the schema-registry test producer:
# confluent-kafka with its Avro, Protobuf and JSON Schema serializers
# (`confluent-kafka[avro,protobuf,json,schemaregistry]`), so the tests' records
# carry the bytes real producers write (the serializer registers the schema
# and frames each record: magic byte 0, the schema id, for Protobuf the
# message-index list, then the Avro binary, the Protobuf message or the JSON
# text). grpcio-tools compiles the tests' .proto files to Python classes
# (ProtobufSerializer takes a generated message class). Prints the venv's python path (give it to the
# tests as COURIER_TEST_PYSCHEMA). Idempotent like scripts/pytools.sh.
set -euo pipefail

CONFLUENT_KAFKA_VERSION=2.16.1
GRPCIO_TOOLS_VERSION=1.85.1
venv=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/venv-schema
python=$venv/bin/python

ready() {
    [[ -x $python ]] && "$python" - "$CONFLUENT_KAFKA_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: F401
import fastavro  # noqa: F401
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer  # noqa: F401
from confluent_kafka.schema_registry.json_schema import JSONSerializer  # noqa: F401
from grpc_tools import protoc  # noqa: F401
sys.exit(0 if version("confluent-kafka") == sys.argv[1] else 1)
PY
}

if ! ready; then
    echo "creating the schema producer's venv at $venv (confluent-kafka[avro,protobuf,json,schemaregistry]==$CONFLUENT_KAFKA_VERSION, grpcio-tools==$GRPCIO_TOOLS_VERSION)" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" >&2
    "$python" -m pip install --quiet "confluent-kafka[avro,protobuf,json,schemaregistry]==$CONFLUENT_KAFKA_VERSION" "grpcio-tools==$GRPCIO_TOOLS_VERSION" >&2
    if ! ready; then
        echo "pyschema.sh: confluent-kafka's serializers (or grpc_tools) do not import from $venv after installing it" >&2
        exit 1
    fi
fi
echo "$python"

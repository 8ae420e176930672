#!/bin/sh
# Writes the image's default config: config/courier.toml with the metrics listener on all
# interfaces (inside a container, 127.0.0.1 is unreachable for probes and Prometheus).
# A config mounted over /etc/courier/courier.toml replaces it entirely, metrics.listen
# included: the image sets no COURIER__* environment variable, which would beat the file.
# Usage: image-config.sh config/courier.toml OUT
set -eu
sed 's|^listen = "127\.0\.0\.1:9464"|listen = "0.0.0.0:9464"|' "$1" > "$2"
if ! grep -q '^listen = "0\.0\.0\.0:9464"' "$2"; then
    echo "image-config.sh: no 'listen = \"127.0.0.1:9464\"' line in $1 to rewrite" >&2
    exit 1
fi

#!/usr/bin/env bash
# Creates (once) the Python virtualenv of the test tools: `standardwebhooks`, the
# Standard Webhooks reference library that the tests' webhook receiver
# (crates/courier-testkit/src/webhook_receiver.py) verifies Courier's signatures
# with — an implementation of the spec independent of Courier's. Prints the
# venv's python path (give it to the tests as COURIER_TEST_PYTHON).
# Idempotent: when the venv exists and the import works it only prints the path;
# a broken or incomplete venv is recreated.
set -euo pipefail

STANDARDWEBHOOKS_VERSION=1.1.0
venv=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/venv
python=$venv/bin/python

# Whether the venv has exactly the pinned version and it imports.
ready() {
    [[ -x $python ]] && "$python" - "$STANDARDWEBHOOKS_VERSION" <<'EOF' >/dev/null 2>&1
import sys
from importlib.metadata import version
from standardwebhooks.webhooks import Webhook  # noqa: F401
sys.exit(0 if version("standardwebhooks") == sys.argv[1] else 1)
EOF
}

if ! ready; then
    echo "creating the test tools' venv at $venv (standardwebhooks==$STANDARDWEBHOOKS_VERSION)" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" >&2
    "$python" -m pip install --quiet "standardwebhooks==$STANDARDWEBHOOKS_VERSION" >&2
    if ! ready; then
        echo "pytools.sh: standardwebhooks does not import from $venv after installing it" >&2
        exit 1
    fi
fi
echo "$python"

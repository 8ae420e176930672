"""A webhook receiver that verifies Standard Webhooks signatures with the reference
library (PyPI `standardwebhooks`): the tests' independent check of the signatures
Courier sends. Started by `courier_testkit::webhooks::Receiver`.

    python webhook_receiver.py PORT

Listens on 127.0.0.1:PORT (HTTP/1.1, keep-alive, one thread per connection).

- POST to any path outside /_control/: 200 when ANY of the accepted secrets
  verifies the request (its `webhook-id` is then counted), else 401 (a rejection
  is counted and the first few reasons kept). No secret accepted yet: 401.
- PUT /_control/secrets with a JSON list of `whsec_...` secrets: the accepted
  secrets from now on (204; 400 if one is malformed).
- GET /_control/stats: {"verified": n, "rejected": n, "ids": {id: count},
  "rejections": [{"path", "webhook_id", "reason"}, ...]}.

Secrets are never printed.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

# How many rejection reasons /_control/stats keeps (the first ones).
KEPT_REJECTIONS = 20


class State:
    """The accepted secrets and what was received, shared by all connections."""

    def __init__(self):
        self.lock = threading.Lock()
        self.webhooks = []
        self.verified = 0
        self.rejected = 0
        self.ids = {}
        self.rejections = []

    def set_secrets(self, secrets):
        hooks = [Webhook(s) for s in secrets]
        with self.lock:
            self.webhooks = hooks

    def verify(self, path, body, headers):
        """Whether any accepted secret verifies the request; records the outcome."""
        with self.lock:
            hooks = list(self.webhooks)
        reason = "no secret is accepted" if not hooks else None
        for hook in hooks:
            try:
                hook.verify(body, headers, json_parse=False)
                reason = None
                break
            except Exception as e:  # noqa: BLE001 - any failure is a rejection
                reason = f"{type(e).__name__}: {e}"
        webhook_id = headers.get("webhook-id")
        with self.lock:
            if reason is None:
                self.verified += 1
                self.ids[webhook_id] = self.ids.get(webhook_id, 0) + 1
                return True
            self.rejected += 1
            if len(self.rejections) < KEPT_REJECTIONS:
                self.rejections.append(
                    {"path": path, "webhook_id": webhook_id, "reason": reason}
                )
            return False

    def stats(self):
        with self.lock:
            return {
                "verified": self.verified,
                "rejected": self.rejected,
                "ids": dict(self.ids),
                "rejections": list(self.rejections),
            }


STATE = State()


class Handler(BaseHTTPRequestHandler):
    """One connection's requests (keep-alive: several per connection)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        # One line per request would flood the log of a load test.
        pass

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    # Trailers, up to the empty line.
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def reply(self, status, body=b"", content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        if body:
            self.send_header("Content-Type", content_type)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_POST(self):
        body = self.read_body()
        if self.path.startswith("/_control/"):
            self.reply(404)
            return
        headers = {k.lower(): v for (k, v) in self.headers.items()}
        if STATE.verify(self.path, body, headers):
            self.reply(200, b'{"ok":true}')
        else:
            self.reply(401, b'{"error":"invalid signature"}')

    def do_PUT(self):
        body = self.read_body()
        if self.path != "/_control/secrets":
            self.reply(404)
            return
        try:
            secrets = json.loads(body)
            if not isinstance(secrets, list) or not all(isinstance(s, str) for s in secrets):
                raise ValueError("expected a JSON list of strings")
            STATE.set_secrets(secrets)
        except Exception as e:  # noqa: BLE001 - reported to the caller
            # The exception's type only: its message could quote a secret.
            self.reply(400, json.dumps({"error": type(e).__name__}).encode())
            return
        self.reply(204)

    def do_GET(self):
        self.read_body()
        if self.path != "/_control/stats":
            self.reply(404)
            return
        self.reply(200, json.dumps(STATE.stats()).encode())


class Server(ThreadingHTTPServer):
    """Many concurrent connections: a deep accept queue, daemon threads."""

    daemon_threads = True
    request_queue_size = 1024


def main():
    port = int(sys.argv[1])
    server = Server(("127.0.0.1", port), Handler)
    print(f"webhook receiver listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

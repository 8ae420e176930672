"""A stand-in for a Confluent-compatible Schema Registry, for tests only.

No real registry runs on the test machines (Apicurio Registry's app is on
Maven Central, but modules it depends on are not; Confluent's registry is not
on Maven Central; Karapace is not on PyPI), so the tests use this: the subset
of the Confluent REST API that confluent-kafka's serializers and Courier use,
with the registry's answers and status codes:

- POST /subjects/{subject}/versions  {"schema", "schemaType"?, "references"?}
  -> {"id"}; the same schema text under any subject gets the same id.
- GET /schemas/ids/{id}  -> {"schema", "schemaType" (absent for AVRO), "references"?}
  or 404 {"error_code": 40403}.
- GET /subjects/{subject}/versions/{version|latest} -> {"subject", "version", "id", "schema", ...}
- POST /subjects/{subject}  (look a schema up) -> the version, or 404.
- GET /subjects -> the subjects.
- GET /_control/stats -> {"ids_fetched": {id: count}} (how often Courier asked).

State lives in the file given as the second argument, so a stopped and
restarted stand-in answers as before. Usage: python this.py PORT STATE_FILE
"""

import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
STATE = sys.argv[2]
LOCK = threading.Lock()

if os.path.exists(STATE):
    with open(STATE) as f:
        state = json.load(f)
else:
    state = {"schemas": [], "subjects": {}}
fetched = {}


def save():
    tmp = STATE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, STATE)


def schema_answer(i):
    s = state["schemas"][i - 1]
    out = {"schema": s["schema"]}
    if s.get("schemaType", "AVRO") != "AVRO":
        out["schemaType"] = s["schemaType"]
    if s.get("references"):
        out["references"] = s["references"]
    return out


def version_answer(subject, v):
    versions = state["subjects"][subject]
    i = versions[v - 1]
    out = {"subject": subject, "version": v, "id": i}
    out.update(schema_answer(i))
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("%s\n" % (fmt % args))

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/vnd.schemaregistry.v1+json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_found(self, code, what):
        self.reply(404, {"error_code": code, "message": what + " not found"})

    def body(self):
        n = int(self.headers.get("content-length", "0"))
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self):
        path = self.path.split("?")[0]
        with LOCK:
            if path == "/_control/stats":
                return self.reply(200, {"ids_fetched": fetched})
            if path == "/subjects":
                return self.reply(200, sorted(state["subjects"]))
            m = re.fullmatch(r"/schemas/ids/(\d+)", path)
            if m:
                i = int(m.group(1))
                fetched[str(i)] = fetched.get(str(i), 0) + 1
                if not 1 <= i <= len(state["schemas"]):
                    return self.not_found(40403, "Schema")
                return self.reply(200, schema_answer(i))
            m = re.fullmatch(r"/subjects/([^/]+)/versions/(latest|\d+)", path)
            if m:
                subject = m.group(1)
                versions = state["subjects"].get(subject)
                if not versions:
                    return self.not_found(40401, "Subject")
                v = len(versions) if m.group(2) == "latest" else int(m.group(2))
                if not 1 <= v <= len(versions):
                    return self.not_found(40402, "Version")
                return self.reply(200, version_answer(subject, v))
            m = re.fullmatch(r"/subjects/([^/]+)/versions", path)
            if m:
                versions = state["subjects"].get(m.group(1))
                if not versions:
                    return self.not_found(40401, "Subject")
                return self.reply(200, list(range(1, len(versions) + 1)))
        self.not_found(404, "Path")

    def do_POST(self):
        path = self.path.split("?")[0]
        req = self.body()
        entry = {
            "schema": req.get("schema", ""),
            "schemaType": req.get("schemaType", "AVRO") or "AVRO",
            "references": req.get("references") or [],
        }
        with LOCK:
            m = re.fullmatch(r"/subjects/([^/]+)/versions", path)
            if m:
                subject = m.group(1)
                if entry in state["schemas"]:
                    i = state["schemas"].index(entry) + 1
                else:
                    state["schemas"].append(entry)
                    i = len(state["schemas"])
                versions = state["subjects"].setdefault(subject, [])
                if i not in versions:
                    versions.append(i)
                save()
                out = {"id": i, "subject": subject, "version": versions.index(i) + 1}
                out.update(schema_answer(i))
                return self.reply(200, out)
            m = re.fullmatch(r"/subjects/([^/]+)", path)
            if m:
                subject = m.group(1)
                for v, i in enumerate(state["subjects"].get(subject, []), 1):
                    if state["schemas"][i - 1] == entry:
                        return self.reply(200, version_answer(subject, v))
                return self.not_found(40403, "Schema")
        self.not_found(404, "Path")


ThreadingHTTPServer.allow_reuse_address = True
server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print("schema registry stand-in on port %d" % PORT, flush=True)
server.serve_forever()

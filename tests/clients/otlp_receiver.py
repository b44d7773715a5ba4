"""An OTLP/HTTP trace receiver for codemode-host's tests.

Listens on 127.0.0.1 (a free port), prints `listening PORT`, then decodes every
export POSTed to it with the official protobuf definitions (PyPI
`opentelemetry-proto`) and prints each span as one JSON line: path, service,
trace_id, span_id, parent_span_id (hex; "" for a root), name, kind, status (its
code) and attributes (key to value). Answers each export with an empty
ExportTraceServiceResponse.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Exports arrive on threads of their own (two services may export at once): one
# line is written whole before another begins.
PRINTING = threading.Lock()

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            service = attributes(resource_spans.resource.attributes).get("service.name")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    line = {
                        "path": self.path,
                        "service": service,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "status": span.status.code,
                        "attributes": attributes(span.attributes),
                    }
                    with PRINTING:
                        sys.stdout.write(json.dumps(line) + "\n")
                        sys.stdout.flush()
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(f"listening {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()

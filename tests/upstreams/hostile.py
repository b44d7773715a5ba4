"""A hostile upstream MCP server for codemode-host's tests and soak.

Speaks MCP's stdio transport by hand (standard library only), so that it can send
what no SDK would: a tool list whose schemas explode when expanded, a result over
any limit, a line that never ends, a flood of list_changed notifications, error
messages that try to forge log lines. What it does is chosen by HOSTILE_MODE, a
comma-separated list of:

  bomb      list a tool `bomb` whose $defs reference each other 8 times per level
            (about 10 KB, 8^31 types when expanded)
  wide      list a tool `wide` with 60,000 required properties
  deep      list a tool `deep` whose schema nests 300 arrays deep
  slowlist  answer tools/list after HOSTILE_SLOW seconds (default 60)
  gated     answer initialize only once the file HOSTILE_GATE names exists (a
            start that lasts exactly as long as the test wants)
  family    at start, start two grandchildren that ignore SIGTERM: one in this
            process's group, one in a session of its own (`setsid`); their PIDs
            are logged as `grandchild PID` and `detached PID`
  linger    stay after stdin ends (the MCP client is gone), until killed
  crash     exit when `tools/call` names `crash` (a crash loop, as often as it is
            called)
  flood     on `notifications/initialized`, and after answering each tools/list,
            send 100 list_changed notifications
  http      speak MCP's Streamable HTTP transport instead, on 127.0.0.1 at a port
            of its own, written to the file HOSTILE_PORT names; answers are JSON
            bodies
  sse       with http, answer each request as an SSE stream instead

Whatever the mode, it lists `echo` (answers its `text`), `fail` (a JSON-RPC error
whose message is its `text`), `shout` (writes its `text` to stderr, then answers
`ok`), `huge` (a result of HOSTILE_HUGE_BYTES bytes, default 17 MiB), `nested` (a
result nested 150 levels deep) and `stall` (writes half a line, never the rest). Each start appends `started PID` to the
file HOSTILE_LOG names, and each `tools/list` answered appends `listed T` (T: the
monotonic clock, in seconds).
"""

import json
import os
import sys
import time

MODES = set(filter(None, os.environ.get("HOSTILE_MODE", "").split(",")))
out = sys.stdout.buffer
# Where `send` writes: stdout, or (with http) the answer being built.
sink = None


def log(line):
    path = os.environ.get("HOSTILE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def send(message):
    if sink is not None:
        sink.append(message)
        return
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def text_tool(name, description):
    return {
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    }


def bomb():
    defs = {}
    for level in range(31):
        ref = {"$ref": f"#/$defs/o{level + 1}"}
        defs[f"o{level}"] = {
            "type": "object",
            "properties": {f"p{p}": ref for p in range(8)},
        }
    defs["o31"] = {"type": "string"}
    return {
        "name": "bomb",
        "description": "Explodes when its references are copied.",
        "inputSchema": {
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/o0"}},
            "$defs": defs,
        },
    }


def wide():
    names = [f"p{i:05}" for i in range(60_000)]
    return {
        "name": "wide",
        "description": "Has 60,000 required properties.",
        "inputSchema": {
            "type": "object",
            "properties": {n: {"type": "integer"} for n in names},
            "required": names,
        },
    }


def deep():
    schema = {"type": "string"}
    for _ in range(300):
        schema = {"type": "array", "items": schema}
    return {
        "name": "deep",
        "description": "Nests 300 arrays deep.",
        "inputSchema": {
            "type": "object",
            "properties": {"x": schema},
            "required": ["x"],
        },
    }


def tools():
    listed = [
        text_tool("echo", "Answers its text."),
        text_tool("fail", "Fails with its text as the error message."),
        text_tool("shout", "Writes its text to stderr."),
        {"name": "huge", "description": "Answers too much.", "inputSchema": {"type": "object"}},
        {"name": "stall", "description": "Never ends its answer.", "inputSchema": {"type": "object"}},
        {"name": "nested", "description": "Answers a value nested 150 levels deep.", "inputSchema": {"type": "object"}},
    ]
    if "crash" in MODES:
        listed.append({"name": "crash", "description": "Ends the server mid-call.", "inputSchema": {"type": "object"}})
    if "bomb" in MODES:
        listed.append(bomb())
    if "wide" in MODES:
        listed.append(wide())
    if "deep" in MODES:
        listed.append(deep())
    return listed


def result(text):
    return {"content": [{"type": "text", "text": text}], "isError": False}


def call(request_id, name, arguments):
    text = str(arguments.get("text", ""))
    if name == "echo":
        send({"jsonrpc": "2.0", "id": request_id, "result": result(text)})
    elif name == "fail":
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": text}})
    elif name == "shout":
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        send({"jsonrpc": "2.0", "id": request_id, "result": result("ok")})
    elif name == "huge":
        size = int(os.environ.get("HOSTILE_HUGE_BYTES", str(17 << 20)))
        send({"jsonrpc": "2.0", "id": request_id, "result": result("x" * size)})
    elif name == "crash" and "crash" in MODES:
        log("crash")
        os._exit(3)
    elif name == "nested":
        deep = "x"
        for _ in range(150):
            deep = [deep]
        answer = result("nested")
        answer["structuredContent"] = {"deep": deep}
        send({"jsonrpc": "2.0", "id": request_id, "result": answer})
    elif name == "stall":
        out.write(b'{"jsonrpc": "2.0", "id": ' + json.dumps(request_id).encode() + b', "res')
        out.flush()
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"no tool {name}"}})


def flood():
    for _ in range(100):
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})


def family():
    import subprocess

    stubborn = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"]
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    grandchild = subprocess.Popen(stubborn, **quiet)
    detached = subprocess.Popen(stubborn, start_new_session=True, **quiet)
    log(f"grandchild {grandchild.pid}")
    log(f"detached {detached.pid}")


def handle(message):
    """Answers one message with `send`."""
    method = message.get("method")
    request_id = message.get("id")
    params = message.get("params") or {}
    if method == "initialize":
        if "gated" in MODES:
            while not os.path.exists(os.environ["HOSTILE_GATE"]):
                time.sleep(0.02)
        send({
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hostile", "version": "1.0.0"},
            },
        })
    elif method == "notifications/initialized":
        if "flood" in MODES:
            flood()
    elif method == "tools/list":
        if "slowlist" in MODES:
            time.sleep(float(os.environ.get("HOSTILE_SLOW", "60")))
        log(f"listed {time.monotonic():.6f}")
        send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools()}})
        if "flood" in MODES:
            flood()
    elif method == "tools/call":
        call(request_id, params.get("name"), params.get("arguments") or {})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": request_id, "result": {}})
    elif request_id is not None:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no such method"}})


def serve_http():
    """Streamable HTTP: each POST's messages answered in its response."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(405)
            self.end_headers()

        def do_DELETE(self):
            self.send_response(200)
            self.end_headers()

        def do_POST(self):
            global sink
            message = json.loads(self.rfile.read(int(self.headers["content-length"])))
            sink = []
            handle(message)
            answers, sink = sink, None
            if message.get("id") is None:
                self.send_response(202)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("mcp-session-id", "hostile")
            if "sse" in MODES:
                body = b"".join(b"data: " + json.dumps(a).encode() + b"\n\n" for a in answers)
                self.send_header("content-type", "text/event-stream")
            else:
                body = json.dumps(answers[-1]).encode()
                self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client refused the answer (too large): what is tested

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(os.environ["HOSTILE_PORT"], "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


def main():
    log(f"started {os.getpid()}")
    if "family" in MODES:
        family()
    if "http" in MODES:
        serve_http()
        return
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        handle(message)
    if "linger" in MODES:
        time.sleep(3600)


if __name__ == "__main__":
    main()

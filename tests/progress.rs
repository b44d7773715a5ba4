//! Progress of an `execute` whose request carries a `progressToken`: the official
//! Python and TypeScript SDK clients' progress callbacks hear of each successful
//! native call (calls so far, the capability's name), at most one per 100 ms, all
//! before the answer. A request without a token gets none: over HTTP its answer
//! stays one JSON body, with one it is an SSE stream.

use serde_json::{Value, json};

use crate::stdio::ok;
use crate::support::{
    HttpServer, drive_http, drive_mode, node_tools, plugin_folder, raw_request, test_plugin,
    with_cache,
};

/// Three naps of 150 ms: each call ends more than 100 ms after the one before, so
/// each is told.
const NAPS: &str = "def main():\n    return [sleepy.nap(ms=150)[\"ms\"] for i in range(3)]";

/// What a client that asked hears.
fn told() -> Value {
    json!([
        [1.0, null, "sleepy.nap"],
        [2.0, null, "sleepy.nap"],
        [3.0, null, "sleepy.nap"]
    ])
}

/// A plugins folder of its own for the test `label`, holding `sleepy`.
fn sleepy(label: &str) -> std::path::PathBuf {
    plugin_folder(label, &[test_plugin("sleepy")])
}

fn naps_with_progress() -> Value {
    json!({"op": "call", "tool": "execute", "arguments": {"source": NAPS}, "progress": true})
}

/// The Python client over stdio (the legacy handshake and 2026-07-28) and over
/// HTTP (2026-07-28): every call told, in order.
#[test]
fn the_python_clients_progress_callback_hears_of_each_call() {
    let plugins = sleepy("progress-python");
    let args = ["--plugins", plugins.to_str().expect("utf-8 path")];
    let server = HttpServer::start(&["--allow-all", args[0], args[1]]);
    let runs = [
        drive_mode(&args, "legacy", json!([naps_with_progress()])),
        drive_mode(&args, "2026-07-28", json!([naps_with_progress()])),
        drive_http(
            &server.url(),
            json!({}),
            "2026-07-28",
            json!([naps_with_progress()]),
        ),
    ];
    for out in runs {
        let result = &out["results"][0];
        assert_eq!(ok(result)["result"], json!([150, 150, 150]), "{out}");
        assert_eq!(result["progress"], told(), "{out}");
    }
}

/// The TypeScript SDK client over stdio: every count on the wire before the
/// answer.
#[test]
fn the_typescript_clients_onprogress_hears_of_each_call() {
    let tools = node_tools();
    let plugins = sleepy("progress-typescript");
    let script = json!({
        "sdk": tools.sdk,
        "command": crate::support::host_bin(),
        "args": with_cache(&["--plugins", plugins.to_str().expect("utf-8 path")]),
        "source": NAPS,
    });
    let out = crate::support::run_node(&tools.node, "tests/clients/sdk_progress.mjs", &script);
    // Every count reaches the client before the answer.
    assert_eq!(
        out["wire"],
        json!([
            ["progress", 1, null, "sleepy.nap"],
            ["progress", 2, null, "sleepy.nap"],
            ["progress", 3, null, "sleepy.nap"],
            ["answer"]
        ]),
        "{out}"
    );
    // The callback hears each, except that the SDK drops the last one when it
    // read it in the same chunk as the answer (typescript-sdk#2580, a race on a
    // busy machine that no server can avoid).
    let all = json!([
        [1, null, "sleepy.nap"],
        [2, null, "sleepy.nap"],
        [3, null, "sleepy.nap"]
    ]);
    let but_the_last = json!([[1, null, "sleepy.nap"], [2, null, "sleepy.nap"]]);
    assert!(
        out["progress"] == all || out["progress"] == but_the_last,
        "{out}"
    );
    assert_eq!(
        out["result"]["structuredContent"],
        json!({"result": [150, 150, 150]})
    );
}

/// Over HTTP the answer is one JSON body unless the request asked for progress;
/// then it is an SSE stream with the notifications before the answer.
#[test]
fn over_http_only_a_request_that_asks_gets_a_stream() {
    let plugins = sleepy("progress-http");
    let server = HttpServer::start(&[
        "--allow-all",
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
    ]);
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let call = |meta: Value| {
        let mut params = json!({"name": "execute", "arguments": {"source": NAPS}});
        if !meta.is_null() {
            params["_meta"] = meta;
        }
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
        raw_request(server.port, "POST", "/mcp", &headers, &body.to_string())
    };
    let plain = call(Value::Null);
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert_eq!(plain.header("content-type"), Some("application/json"));
    let answer: Value = serde_json::from_str(&plain.body).expect("one JSON body");
    assert_eq!(
        answer["result"]["structuredContent"],
        json!({"result": [150, 150, 150]})
    );
    let streamed = call(json!({"progressToken": "p-1"}));
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    assert_eq!(streamed.header("content-type"), Some("text/event-stream"));
    let messages: Vec<Value> = streamed
        .body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str(data.trim()).expect("a JSON message"))
        .collect();
    let progress: Vec<Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"].clone())
        .collect();
    assert_eq!(
        progress,
        [1, 2, 3]
            .map(|n| json!({"progressToken": "p-1", "progress": n as f64, "message": "sleepy.nap"}))
            .to_vec()
    );
    let last = messages.last().expect("messages");
    assert_eq!(last["id"], 7, "the answer comes last: {messages:?}");
    assert_eq!(
        last["result"]["structuredContent"],
        json!({"result": [150, 150, 150]})
    );
}

/// Over stdio every notification comes before the answer: the line after the
/// answer is the answer of the next request, never a late notification.
#[test]
fn over_stdio_no_notification_follows_the_answer() {
    let plugins = sleepy("progress-stdio");
    let mut server =
        crate::support::StdioClient::start(&["--plugins", plugins.to_str().expect("utf-8 path")]);
    server.initialize("2025-11-25");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "execute", "arguments": {"source": NAPS}, "_meta": {"progressToken": 9}}});
    server.send(call.to_string());
    let mut progress = Vec::new();
    let answer = loop {
        let message = server.read();
        if message["method"] == "notifications/progress" {
            progress.push(message["params"].clone());
        } else {
            break message;
        }
    };
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"],
        json!({"result": [150, 150, 150]})
    );
    assert_eq!(
        progress,
        [1, 2, 3]
            .map(|n| json!({"progressToken": 9, "progress": n as f64, "message": "sleepy.nap"}))
            .to_vec()
    );
    assert_eq!(
        server.exchange(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#),
        json!({"jsonrpc": "2.0", "id": 3, "result": {}})
    );
    let status = server.close();
    assert!(status.success(), "{status}");
}

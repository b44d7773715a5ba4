//! The MCP contract over stdio, seen through the Python SDK client.

use serde_json::{Value, json};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::support::{
    INITIALIZED, StdioClient, drive, example_plugins, host_bin, initialize_line, plugin_folder,
    test_plugin, wait_until, with_cache,
};

fn serve_examples(steps: Value) -> Value {
    let dir = example_plugins();
    drive(&["--plugins", dir.to_str().expect("utf-8 path")], steps)
}

pub(crate) fn call(tool: &str, arguments: Value) -> Value {
    json!({"op": "call", "tool": tool, "arguments": arguments})
}

/// A successful result: structured content, and a text mirror holding the same JSON.
pub(crate) fn ok(result: &Value) -> &Value {
    assert_eq!(result["is_error"], json!(false), "{result}");
    let mirror: Value = serde_json::from_str(result["text"][0].as_str().expect("text mirror"))
        .expect("mirror is JSON");
    assert_eq!(
        mirror, result["structured"],
        "text mirror differs from structuredContent"
    );
    &result["structured"]
}

/// A failed result: isError with exactly one text.
pub(crate) fn err(result: &Value) -> &str {
    assert_eq!(result["is_error"], json!(true), "{result}");
    assert_eq!(result["text"].as_array().map(Vec::len), Some(1), "{result}");
    result["text"][0].as_str().expect("text")
}

#[test]
fn initialize_and_tools_list_follow_the_contract() {
    let out = serve_examples(json!([{"op": "list_tools"}]));
    assert_eq!(out["server_info"]["name"], "codemode-host");
    assert_eq!(out["server_info"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(out["instructions"], codemode_server::mcp::INSTRUCTIONS);
    let tools = out["results"][0].as_array().expect("tools");
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, vec!["search_api", "describe_api", "execute"]);
    assert_eq!(
        tools[2]["description"],
        codemode_server::mcp::EXECUTE_DESCRIPTION
    );
    assert_eq!(
        tools[2]["inputSchema"],
        json!({"type": "object", "required": ["source"], "additionalProperties": false, "properties": {"source": {"type": "string"}}})
    );
    assert_eq!(
        tools[2]["outputSchema"],
        json!({"type": "object", "required": ["result"], "additionalProperties": false, "properties": {"result": {}}})
    );
    assert_eq!(
        tools[0]["description"],
        codemode_server::mcp::SEARCH_API_DESCRIPTION
    );
    assert_eq!(
        tools[1]["description"],
        codemode_server::mcp::DESCRIBE_API_DESCRIPTION
    );
    assert_eq!(
        tools[0]["inputSchema"],
        json!({"type": "object", "required": ["query"], "additionalProperties": false, "properties": {"query": {"type": "string"}}})
    );
    assert_eq!(
        tools[1]["inputSchema"],
        json!({"type": "object", "required": ["name"], "additionalProperties": false, "properties": {"name": {"type": "string"}}})
    );
    assert_eq!(
        tools[0]["outputSchema"]["required"],
        json!(["results", "truncated"])
    );
    assert_eq!(
        tools[1]["outputSchema"]["required"],
        json!([
            "name",
            "signature",
            "summary",
            "description",
            "input",
            "output"
        ])
    );
}

#[test]
fn search_ranks_and_bounds_results() {
    let out = serve_examples(json!([
        call("search_api", json!({"query": "records lookup"})),
        call("search_api", json!({"query": "   "})),
        call("search_api", json!({"query": "the and of"})),
        call("search_api", json!({"query": "zebra quokka"})),
        call("search_api", json!({"query": "x".repeat(257)})),
        call(
            "search_api",
            json!({"query": (0..17).map(|i| format!("w{}", "q".repeat(i + 1))).collect::<Vec<_>>().join(" ")})
        ),
        call("search_api", json!({"query": "average"})),
        call("search_api", json!({"query": "STATS.Summary"})),
    ]));
    let r = &out["results"];
    let first = &ok(&r[0])["results"][0];
    assert_eq!(
        first,
        &json!({"name": "records.lookup", "signature": "records.lookup(*, key: str)", "summary": "Look up one book by its key."})
    );
    let empty = json!({"results": [], "truncated": false});
    assert_eq!(ok(&r[1]), &empty);
    assert_eq!(ok(&r[2]), &empty);
    assert_eq!(ok(&r[3]), &empty);
    assert_eq!(err(&r[4]), "resource limit exceeded");
    assert_eq!(err(&r[5]), "resource limit exceeded");
    // A search term ("average") finds stats.summary.
    assert_eq!(ok(&r[6])["results"][0]["name"], "stats.summary");
    // A case-insensitive exact dotted name ranks first.
    assert_eq!(ok(&r[7])["results"][0]["name"], "stats.summary");
}

#[test]
fn describe_shows_signatures_and_field_shapes() {
    let out = serve_examples(json!([
        call("describe_api", json!({"name": "records.query"})),
        call("describe_api", json!({"name": "text.word_counts"})),
        call("describe_api", json!({"name": "records.genres"})),
        call("describe_api", json!({"name": "records.nope"})),
        call("describe_api", json!({"name": " records.query"})),
        call("describe_api", json!({"name": "Records.query"})),
    ]));
    let r = &out["results"];
    assert_eq!(
        ok(&r[0]),
        &json!({
            "name": "records.query",
            "signature": "records.query(*, filter: {genre: \"fiction\" | \"mystery\" | \"science-fiction\" | \"fantasy\" | \"history\" | \"biography\" | \"poetry\" | \"science\" | None, author: str | None, min_score: float | None, published: {from: int, until: int} | None}, tags: list[str], limit: int | None)",
            "summary": "Query books by genre, author, minimum score, publication years and tags.",
            "description": "Returns the books matching every given filter field (genre, author substring, min_score, published {from, until} inclusive) and carrying all the given tags, in key order; total counts all matches, items holds at most limit (default 20, at most 500).\n\nArguments:\n- filter: (genre: Only books of this genre; author: Only books whose author's name contains this text, ignoring case; min_score: Only books rated at least this (1.0 to 5.0); published: Only books published in these years, both included)\n- tags: tags a book must all carry (none: any book)\n- limit: most books in items, 1 to 500 (default 20)",
            "input": [
                {"name": "filter", "type": "{genre: \"fiction\" | \"mystery\" | \"science-fiction\" | \"fantasy\" | \"history\" | \"biography\" | \"poetry\" | \"science\" | None, author: str | None, min_score: float | None, published: {from: int, until: int} | None}", "required": true},
                {"name": "tags", "type": "list[str]", "required": true},
                {"name": "limit", "type": "int | None", "required": false}
            ],
            "output": [
                {"name": "total", "type": "int", "required": true},
                {"name": "items", "type": "list[{key: str, title: str, author: {name: str, country: str, born: int | None}, year: int, genre: \"fiction\" | \"mystery\" | \"science-fiction\" | \"fantasy\" | \"history\" | \"biography\" | \"poetry\" | \"science\", tags: list[str], score: float, pages: int}]", "required": true}
            ]
        })
    );
    let counts = ok(&r[1]);
    assert_eq!(
        counts["signature"],
        "text.word_counts(*, text: str, top: int | None)"
    );
    assert_eq!(
        counts["output"],
        json!([{"name": "total", "type": "int", "required": true}, {"name": "counts", "type": "dict[str, int]", "required": true}])
    );
    let genres = ok(&r[2]);
    assert_eq!(genres["signature"], "records.genres()");
    assert_eq!(genres["input"], json!([]));
    for miss in &r.as_array().expect("results")[3..] {
        assert_eq!(err(miss), "capability not found");
    }
}

/// Arguments that violate a tool's input schema are a tool error result the model
/// can read and fix (SEP-1303), before any work; an unknown tool stays a protocol
/// error. `steps` for each transport and revision below.
pub(crate) fn malformed_steps() -> Value {
    json!([
        call("search_api", json!({})),
        call("search_api", json!({"query": "x", "limit": 2})),
        call("describe_api", json!({"name": 3})),
        call("execute", json!({"source": ["def main():"]})),
        call("no_such_tool", json!({})),
    ])
}

/// What [`malformed_steps`] answer, whatever the transport and revision.
pub(crate) fn assert_malformed(out: &Value) {
    let r = &out["results"];
    assert_eq!(
        err(&r[0]),
        "search_api: missing required property \"query\""
    );
    assert_eq!(
        err(&r[1]),
        "search_api: unexpected property \"limit\" (additionalProperties is false)"
    );
    assert_eq!(
        err(&r[2]),
        "describe_api: property \"name\" must be a string"
    );
    assert_eq!(err(&r[3]), "execute: property \"source\" must be a string");
    assert_eq!(
        r[4]["protocol_error"].as_str(),
        Some("unknown tool \"no_such_tool\""),
        "{}",
        r[4]
    );
}

#[test]
fn malformed_arguments_are_tool_errors_before_any_work() {
    assert_malformed(&serve_examples(malformed_steps()));
}

#[test]
fn malformed_arguments_are_tool_errors_on_the_2026_revision_too() {
    let plugins = example_plugins();
    let out = crate::support::drive_mode(
        &["--plugins", plugins.to_str().expect("utf-8 path")],
        "2026-07-28",
        malformed_steps(),
    );
    assert_malformed(&out);
}

/// Every line gets an answer over stdio: not JSON → `-32700`, JSON that is not a
/// JSON-RPC message → `-32600` (with its id), a line over 16 MiB → `-32600` naming
/// the limit; the session goes on after each. Arguments are checked before the
/// subject: with an empty subject a malformed call is a tool error naming the
/// property, a valid one `unauthenticated`.
#[test]
fn every_line_gets_an_answer_and_arguments_come_before_the_subject() {
    let plugins = example_plugins();
    let mut server = StdioClient::start(&[
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
        "--subject",
        "",
    ]);
    // One line out, one answer back (a notification gets none).
    let mut exchange = |line: &[u8], answered: bool| -> Value {
        if !answered {
            server.send(line);
            return Value::Null;
        }
        server.exchange(line)
    };
    let initialized = exchange(
        br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        true,
    );
    assert_eq!(initialized["id"], 1, "{initialized}");
    exchange(
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        false,
    );
    assert_eq!(
        exchange(b"{not json", true),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error: a line must be one JSON-RPC message"}})
    );
    assert_eq!(
        exchange(&vec![b'x'; 16 * 1024 * 1024 + 1], true),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request: a message line may be at most 16 MiB"}})
    );
    assert_eq!(
        exchange(br#"{"jsonrpc":"2.0","id":"s","method":42}"#, true),
        json!({"jsonrpc": "2.0", "id": "s", "error": {"code": -32600, "message": "Invalid Request: not a JSON-RPC 2.0 message"}})
    );
    let malformed = exchange(
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_api","arguments":{"query":"x","extra":1}}}"#,
        true,
    );
    assert_eq!(
        malformed,
        json!({"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "search_api: unexpected property \"extra\" (additionalProperties is false)"}], "isError": true}})
    );
    let valid = exchange(
        br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search_api","arguments":{"query":"x"}}}"#,
        true,
    );
    assert_eq!(valid["id"], 3);
    assert_eq!(valid["result"]["isError"], true, "{valid}");
    assert_eq!(valid["result"]["content"][0]["text"], "unauthenticated");
    assert_eq!(
        exchange(br#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#, true),
        json!({"jsonrpc": "2.0", "id": 4, "result": {}})
    );
    let status = server.close();
    assert!(status.success(), "{status}");
}

/// Over stdio the server answers while its plugins load (a cold cache takes tens
/// of seconds, longer than clients wait for `initialize`): `initialize` and
/// `tools/list` at once; an `execute` waits for the load, at most
/// `--startup-wait`, and its time budget starts when the load is done;
/// `search_api` waits for the load. drowsy's
/// `describe()` holds the load for its 6 s timeout. A SIGHUP during the load
/// (whose handler the current-thread runtime installs before it serves) neither
/// ends the server nor stops it serving.
#[test]
fn a_stdio_server_answers_while_its_plugins_load_and_a_sighup_then_does_not_end_it() {
    let dir = plugin_folder("stdio-answers-while-loading", &[test_plugin("drowsy")]);
    let mut server = StdioClient::spawn(
        Command::new(host_bin())
            .args(with_cache(&[
                "--plugins",
                dir.to_str().expect("utf-8 path"),
                "--load-timeout",
                "6s",
                "--max-execution-time",
                "1s",
                "--log",
                "debug",
            ]))
            .stderr(Stdio::piped()),
    );
    // The log is drained by a thread, so that the server never blocks writing it.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let stderr = BufReader::new(server.child.stderr.take().expect("stderr"));
    let drained = {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let mut log = log.lock().expect("log");
                log.push_str(&line);
                log.push('\n');
            }
        })
    };
    let text = || log.lock().expect("log").clone();
    const LOADED: &str = "did not return within 6000 ms (--load-timeout)";
    // Logged as the load begins, before any plugin is read.
    wait_until(
        "the load to begin",
        || text().contains("instance pool sized"),
        text,
    );
    let hup = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(hup.success());
    let mut exchange = |line: &str, answered: bool| -> Value {
        server.send(line);
        match answered {
            true => server.read_with_log(&text),
            false => Value::Null,
        }
    };
    let initialized = exchange(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        true,
    );
    assert_eq!(
        initialized["result"]["serverInfo"]["name"], "codemode-host",
        "{initialized}"
    );
    exchange(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        false,
    );
    let listed = exchange(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#, true);
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(names, ["search_api", "describe_api", "execute"]);
    assert!(
        !text().contains(LOADED),
        "answered only after the load:\n{}",
        text()
    );
    let execute = r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"execute","arguments":{"source":"def main():\n    return 1"}}}"#;
    // An execute sent during the load waits for it (6 s), and the wait is not
    // its time (1 s): it runs once the load is done.
    let early = exchange(&execute.replace("ID", "3"), true);
    assert_eq!(
        early["result"]["structuredContent"],
        json!({"result": 1}),
        "{early}"
    );
    let stats = &early["result"]["_meta"]["codemode/stats"];
    assert!(
        stats["elapsed_us"].as_u64().expect("elapsed") < 1_000_000,
        "{early}"
    );
    wait_until(
        "the load's end in the log",
        || text().contains(LOADED),
        text,
    );
    // search_api waits for the catalog.
    let searched = exchange(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"search_api","arguments":{"query":"anything"}}}"#,
        true,
    );
    assert_eq!(searched["result"]["isError"], false, "{searched}");
    assert!(
        text().contains(LOADED),
        "search answered before the load:\n{}",
        text()
    );
    let late = exchange(&execute.replace("ID", "5"), true);
    assert_eq!(
        late["result"]["structuredContent"],
        json!({"result": 1}),
        "{late}"
    );
    let status = server.close();
    drained.join().expect("the log thread");
    let log = text();
    assert!(status.success(), "{status}\n{log}");
    assert!(
        log.contains("SIGHUP: nothing to reload (no --tokens, no --policy, no --config)"),
        "{log}"
    );

    // Past --startup-wait, an execute fails saying why, without a budget's name.
    let mut server = StdioClient::start(&[
        "--plugins",
        dir.to_str().expect("utf-8 path"),
        "--load-timeout",
        "6s",
        "--startup-wait",
        "1s",
    ]);
    for line in [
        &initialize_line("2025-06-18"),
        INITIALIZED,
        &execute.replace("ID", "2"),
    ] {
        server.send(line);
    }
    let answers = [server.read(), server.read()];
    let early = &answers[1];
    assert_eq!(early["result"]["isError"], true, "{early}");
    assert_eq!(
        early["result"]["content"][0]["text"],
        "capability failed: the server is still starting"
    );
    assert_eq!(
        early["result"]["_meta"]["codemode/stats"].get("limit"),
        None,
        "{early}"
    );
}

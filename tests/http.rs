//! Streamable HTTP: bearer tokens, the Rego policy through the Python MCP client,
//! probes and metrics, DNS-rebinding protection, replicas without affinity, and a
//! graceful shutdown.

use serde_json::{Value, json};

use crate::stdio::{call, err, ok};
use crate::support::{
    HttpServer, drive_http, example_plugin_files, plugin_folder, raw_request, root, rpc,
    test_plugin, wait_for_audit, wait_for_log,
};

/// The analyst's token; it must never show up anywhere a client or the log can see.
const ANALYST_TOKEN: &str = "CANARY-token-analyst-91b2e7";
const GUEST_TOKEN: &str = "guest-token-0c4d";

const LOOKUP: &str = "def main():\n    return records.lookup(key=\"bk-0001\")[\"title\"]";
const QUERY: &str =
    "def main():\n    return records.query(filter={\"genre\": \"fantasy\"}, tags=[])[\"total\"]";
const CRASH: &str = "def main():\n    return hostile.crash()";
/// Three successful calls, then one the policy denies: an execution's successful
/// calls are counted when it ends, whatever ends it.
const THREE_THEN_DENIED: &str = "def main():\n    for key in [\"bk-0001\", \"bk-0002\", \"bk-0001\"]:\n        records.lookup(key=key)\n    return records.query(filter={}, tags=[])";

fn execute(source: &str) -> Value {
    call("execute", json!({ "source": source }))
}

fn path(relative: &str) -> String {
    root()
        .join(relative)
        .to_str()
        .expect("utf-8 path")
        .to_owned()
}

/// A tokens file for the analyst and the guest, under `label`.
fn tokens_file(label: &str) -> String {
    let subjects = [("analyst", ANALYST_TOKEN), ("guest", GUEST_TOKEN)];
    let file = crate::support::tokens_file(label, &subjects);
    file.to_str().expect("utf-8 path").to_owned()
}

/// A server with the example plugins and `hostile`, the analyst policies and tokens.
fn secured_server(label: &str) -> HttpServer {
    let mut files = example_plugin_files();
    files.push(test_plugin("hostile"));
    let plugins = plugin_folder(label, &files);
    HttpServer::start(&[
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
        "--policy",
        &path("tests/policies/analyst.rego"),
        "--policy",
        &path("tests/policies/analyst-hostile.rego"),
        "--tokens",
        &tokens_file(label),
    ])
}

fn bearer(token: &str) -> Value {
    json!({ "Authorization": format!("Bearer {token}") })
}

fn assert_no_canary(what: &str, text: &str) {
    assert!(!text.contains("CANARY"), "a canary reached {what}: {text}");
}

/// Over HTTP, in the legacy handshake (2025-11-25) and the 2026-07-28 revision,
/// arguments that violate a tool's input schema are tool error results too.
#[test]
fn malformed_arguments_are_tool_errors_over_http_in_every_revision() {
    let plugins = plugin_folder("http-malformed", &example_plugin_files());
    let server = HttpServer::start(&[
        "--allow-all",
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
    ]);
    for mode in ["legacy", "2026-07-28"] {
        let out = drive_http(
            &server.url(),
            json!({}),
            mode,
            crate::stdio::malformed_steps(),
        );
        crate::stdio::assert_malformed(&out);
    }
}

#[test]
fn tokens_name_the_subject_and_the_policy_decides() {
    let server = secured_server("http-policy");
    let forged = json!({"op": "call", "tool": "execute", "arguments": {"source": LOOKUP}, "meta": {"subject": "analyst", "codemode/subject": {"id": "analyst"}}});
    let analyst = drive_http(
        &server.url(),
        bearer(ANALYST_TOKEN),
        "legacy",
        json!([
            {"op": "list_tools"},
            execute(LOOKUP),
            execute(QUERY),
            execute(CRASH),
            execute(THREE_THEN_DENIED)
        ]),
    );
    let names: Vec<&Value> = analyst["results"][0]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert_eq!(names, vec!["search_api", "describe_api", "execute"]);
    assert_eq!(
        ok(&analyst["results"][1]),
        &json!({"result": "The Burning Tide"})
    );
    assert_eq!(err(&analyst["results"][2]), "permission denied");
    assert_eq!(err(&analyst["results"][3]), "capability failed");
    assert_eq!(err(&analyst["results"][4]), "permission denied");

    let guest = drive_http(
        &server.url(),
        bearer(GUEST_TOKEN),
        "legacy",
        json!([execute(LOOKUP), forged]),
    );
    assert_eq!(err(&guest["results"][0]), "permission denied");
    assert_eq!(err(&guest["results"][1]), "permission denied");

    let anonymous = drive_http(&server.url(), json!({}), "legacy", json!([execute(LOOKUP)]));
    // The SDK turns the 401 into a generic error (the status is checked raw below).
    assert_eq!(
        anonymous,
        json!({"connect_error": "MCPError: Server returned an error response"})
    );

    for out in [&analyst, &guest, &anonymous] {
        assert_no_canary("a client", &out.to_string());
    }
    let guest = format!("Bearer {GUEST_TOKEN}");
    let metrics = raw_request(
        server.port,
        "GET",
        "/metrics",
        &[("Authorization", &guest)],
        "",
    );
    assert_eq!(metrics.status, 200);
    for line in [
        "codemode_native_calls_total{capability=\"records.lookup\",outcome=\"ok\"} 4",
        "codemode_native_calls_total{capability=\"records.lookup\",outcome=\"permission denied\"} 2",
        "codemode_native_calls_total{capability=\"records.query\",outcome=\"permission denied\"} 2",
        "codemode_native_calls_total{capability=\"hostile.crash\",outcome=\"capability failed\"} 1",
        "codemode_executes_total{outcome=\"ok\"} 1",
        "codemode_executes_total{outcome=\"permission denied\"} 4",
        "codemode_plugins_loaded 4",
    ] {
        assert!(
            metrics.body.lines().any(|l| l == line),
            "missing {line:?} in\n{}",
            metrics.body
        );
    }
    assert_no_canary("the metrics", &metrics.body);
    wait_for_audit(&server, "\"subject\":", 9);
    let (log, audit) = (server.log(), server.audit());
    assert!(!log.contains(ANALYST_TOKEN), "the token reached the log");
    assert!(
        !audit.contains(ANALYST_TOKEN),
        "the token reached the audit log"
    );
    // The audit log has stdout to itself: every line there is an audit line, and
    // none is on stderr, with the operator log.
    assert!(
        !log.contains("\"subject\":"),
        "an audit line in the log:\n{log}"
    );
    let audit: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not audit JSON: {l}")))
        .collect();
    // The audit lines name the authenticated subjects only.
    let subjects: Vec<String> = audit
        .iter()
        .filter_map(|a| a["subject"].as_str().map(str::to_owned))
        .collect();
    let mut expected = vec!["analyst"; 7];
    expected.extend(["guest", "guest"]);
    assert_eq!(subjects, expected);
}

#[test]
fn requests_without_a_valid_token_get_401_with_a_challenge() {
    let server = secured_server("http-401");
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let json_headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let missing = raw_request(server.port, "POST", "/mcp", &json_headers, initialize);
    assert_eq!(missing.status, 401);
    assert_eq!(
        missing.header("www-authenticate"),
        Some("Bearer realm=\"codemode-host\"")
    );
    assert_eq!(missing.body, "unauthenticated\n");
    let wrong = format!("Bearer {GUEST_TOKEN}x");
    let mut headers = json_headers.to_vec();
    headers.push(("Authorization", &wrong));
    let invalid = raw_request(server.port, "POST", "/mcp", &headers, initialize);
    assert_eq!(invalid.status, 401);
    assert_eq!(
        invalid.header("www-authenticate"),
        Some("Bearer realm=\"codemode-host\", error=\"invalid_token\"")
    );
    let good = format!("Bearer {GUEST_TOKEN}");
    let mut headers = json_headers.to_vec();
    headers.push(("Authorization", &good));
    let accepted = raw_request(server.port, "POST", "/mcp", &headers, initialize);
    assert_eq!(accepted.status, 200, "{accepted:?}");
    assert!(accepted.body.contains("\"codemode-host\""), "{accepted:?}");
    // The liveness probe needs no token; what the catalog holds does.
    let health = raw_request(server.port, "GET", "/healthz", &[], "");
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    let ready = raw_request(server.port, "GET", "/readyz", &[], "");
    assert_eq!(
        (ready.status, ready.body.as_str()),
        (401, "unauthenticated\n")
    );
    let with_token = [("Authorization", good.as_str())];
    let ready = raw_request(server.port, "GET", "/readyz", &with_token, "");
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));
    // The two refusals are counted; the accepted request is not (nor are the
    // probes').
    let metrics = raw_request(server.port, "GET", "/metrics", &with_token, "");
    assert!(
        metrics
            .body
            .lines()
            .any(|l| l == "codemode_http_unauthenticated_total 2"),
        "{}",
        metrics.body
    );
}

#[test]
fn a_foreign_host_header_is_refused() {
    let server = secured_server("http-rebinding");
    let good = format!("Bearer {GUEST_TOKEN}");
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let response = raw_request(
        server.port,
        "POST",
        "/mcp",
        &[
            ("Host", "evil.example:80"),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", &good),
        ],
        initialize,
    );
    assert_eq!(response.status, 403, "{response:?}");
}

#[test]
fn replicas_serve_alternating_requests_without_affinity() {
    let a = secured_server("http-replica-a");
    let b = secured_server("http-replica-b");
    let ports = [a.port, b.port];
    let initialized = rpc(
        ports[0],
        ANALYST_TOKEN,
        &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"lb","version":"0"}}}),
    );
    assert_eq!(initialized["result"]["serverInfo"]["name"], "codemode-host");
    rpc(
        ports[1],
        ANALYST_TOKEN,
        &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    );
    for id in 1..=10 {
        let port = ports[id % 2];
        let response = rpc(
            port,
            ANALYST_TOKEN,
            &json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"execute","arguments":{"source":LOOKUP}}}),
        );
        assert_eq!(
            response["result"]["structuredContent"],
            json!({"result": "The Burning Tide"}),
            "request {id} to port {port}: {response}"
        );
    }
    let analyst = format!("Bearer {ANALYST_TOKEN}");
    for server in [&a, &b] {
        let metrics = raw_request(
            server.port,
            "GET",
            "/metrics",
            &[("Authorization", &analyst)],
            "",
        );
        assert!(
            metrics
                .body
                .lines()
                .any(|l| l == "codemode_executes_total{outcome=\"ok\"} 5"),
            "{}",
            metrics.body
        );
    }
}

#[test]
fn sigterm_lets_the_execution_in_flight_finish() {
    let plugins = plugin_folder("http-sigterm", &example_plugin_files());
    let server = HttpServer::allowing(
        &plugins,
        &[
            "--max-execution-steps",
            "100000000",
            "--max-execution-time",
            "20s",
        ],
    );
    let port = server.port;
    // About a second of work, after a call that tells the test it is running.
    let slow = "def main():\n    records.lookup(key=\"bk-0001\")\n    n = 0\n    for i in range(12000000):\n        n += 1\n    return n";
    let request = std::thread::spawn(move || {
        rpc(
            port,
            "",
            &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute","arguments":{"source":slow}}}),
        )
    });
    wait_for_audit(&server, "\"capability\":\"records.lookup\"", 1);
    server.terminate();
    let response = request.join().expect("the request thread");
    assert_eq!(
        response["result"]["structuredContent"],
        json!({"result": 12000000}),
        "{response}"
    );
    let (code, log) = server.wait();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("shutting down"), "{log}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "still accepting after shutdown"
    );
}

#[test]
fn probes_answer_while_the_interpreter_is_prepared() {
    use std::io::BufRead;
    // A fresh cache: preparing the interpreter takes seconds, during which the
    // listener is already up.
    let cache = root().join("target/test-cache/fresh-readyz");
    let _ = std::fs::remove_dir_all(&cache);
    let plugins = plugin_folder("http-readyz", &example_plugin_files());
    let mut child = std::process::Command::new(crate::support::host_bin())
        .args(["--listen", "127.0.0.1:0", "--allow-all", "--plugins"])
        .arg(&plugins)
        .arg("--cache-dir")
        .arg(&cache)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn codemode-host");
    let mut lines = std::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut port = None;
    for line in lines.by_ref() {
        let line = line.expect("read stderr");
        if let Some(at) = line.find("http://127.0.0.1:") {
            port = line[at + 17..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<u16>()
                .ok();
            break;
        }
    }
    let port = port.expect("a listening line");
    let health = raw_request(port, "GET", "/healthz", &[], "");
    let ready = raw_request(port, "GET", "/readyz", &[], "");
    let mcp = raw_request(
        port,
        "POST",
        "/mcp",
        &[("Content-Type", "application/json")],
        "{}",
    );
    let finished = lines.any(|l| l.is_ok_and(|l| l.ends_with("ready to serve")));
    let ready_after = raw_request(port, "GET", "/readyz", &[], "");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    assert_eq!((ready.status, ready.body.as_str()), (503, "loading\n"));
    assert_eq!((mcp.status, mcp.body.as_str()), (503, "loading\n"));
    assert!(finished, "the server never got ready");
    assert_eq!(
        (ready_after.status, ready_after.body.as_str()),
        (200, "ready\n")
    );
}

/// Reads from `stream` until the server closes it; the test fails if that takes
/// longer than `within` (the stream's read timeout).
fn closed_by_the_server(stream: &mut std::net::TcpStream, within: std::time::Duration) -> String {
    use std::io::Read;
    stream.set_read_timeout(Some(within)).expect("timeout");
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => String::from_utf8_lossy(&raw).into_owned(),
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => String::new(),
        Err(error) => panic!("the server kept the connection open: {error}"),
    }
}

#[test]
fn slow_clients_are_cut_off_and_connections_are_capped() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;
    let dir = plugin_folder("http-limits", &example_plugin_files());
    let server = HttpServer::allowing(&dir, &["--max-connections", "4"]);
    let connect = || TcpStream::connect(("127.0.0.1", server.port)).expect("connect");

    // Headers that never end: closed after 10 s (they stayed open for good).
    let mut slow_headers = connect();
    slow_headers
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .expect("send");
    // A body that never ends: cut off 30 s after its headers (it stayed open 60 s).
    let mut slow_body = connect();
    slow_body
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"")
        .expect("send");

    // Two idle connections fill the cap of 4; a fifth waits in the backlog.
    let idle = [connect(), connect()];
    let mut fifth = connect();
    fifth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("send");
    fifth
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let mut byte = [0u8; 1];
    let waited = fifth.read(&mut byte);
    assert!(
        waited.as_ref().is_err_and(|e| matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )),
        "a fifth connection was served past the cap of 4: {waited:?}"
    );
    // One connection closing lets the fifth in.
    drop(idle);
    let answer = closed_by_the_server(&mut fifth, Duration::from_secs(30));
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("ok\n"), "{answer}");

    assert_eq!(
        closed_by_the_server(&mut slow_headers, Duration::from_secs(30)),
        "",
        "unfinished headers: closed without a response"
    );
    let cut = closed_by_the_server(&mut slow_body, Duration::from_secs(60));
    assert!(
        cut.starts_with("HTTP/1.1 500 Internal Server Error\r\n"),
        "{cut}"
    );
    assert!(
        cut.ends_with("\r\n\r\nFailed to read request body: the request body did not arrive within 30000 ms of its headers"),
        "{cut}"
    );
    // The server still serves.
    let health = raw_request(server.port, "GET", "/healthz", &[], "");
    assert_eq!(health.status, 200);
}

/// The port of `--metrics-listen 127.0.0.1:0`, from `server`'s log.
fn metrics_listen_port(server: &HttpServer) -> u16 {
    let log = server.log();
    log.lines()
        .find_map(|line| {
            let at = line.find("probes and metrics at http://127.0.0.1:")?;
            line[at + 39..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no --metrics-listen line in:\n{log}"))
}

#[test]
fn probes_and_metrics_check_the_host_unless_served_on_metrics_listen() {
    let dir = plugin_folder("http-probe-hosts", &example_plugin_files());
    let server = HttpServer::allowing(&dir, &["--metrics-listen", "127.0.0.1:0"]);
    let metrics_port = metrics_listen_port(&server);
    let foreign = [("Host", "rebound.evil.example:80")];
    for path in ["/healthz", "/readyz", "/metrics"] {
        // On --listen, a page whose name was rebound to 127.0.0.1 reads nothing.
        let refused = raw_request(server.port, "GET", path, &foreign, "");
        assert_eq!(
            (refused.status, refused.body.as_str()),
            (403, "forbidden: Host header not allowed\n"),
            "{path}"
        );
        // With a loopback Host it answers as before.
        assert_eq!(
            raw_request(server.port, "GET", path, &[], "").status,
            200,
            "{path}"
        );
        // The orchestrator's address answers whatever the Host (a pod's IP).
        let probed = raw_request(metrics_port, "GET", path, &[("Host", "10.1.2.3:9090")], "");
        assert_eq!(probed.status, 200, "{path}");
    }
    let probed = raw_request(metrics_port, "GET", "/readyz", &[], "");
    assert_eq!(probed.body, "ready\n");
    // MCP is not served there.
    let mcp = raw_request(metrics_port, "POST", "/mcp", &[], "{}");
    assert_eq!(mcp.status, 404);
}

#[test]
fn sigterm_while_a_plugin_loads_stops_the_server() {
    use std::io::BufRead;
    // drowsy's describe() sleeps an hour; with a long load timeout the server
    // stays loading. SIGTERM was ignored until loading finished (forever).
    let dir = plugin_folder("http-sigterm-loading", &[test_plugin("drowsy")]);
    let mut child = std::process::Command::new(crate::support::host_bin())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--allow-all",
            "--load-timeout",
            "1h",
        ])
        .arg("--plugins")
        .arg(&dir)
        .arg("--cache-dir")
        .arg(crate::support::cache_dir())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn codemode-host");
    let mut lines = std::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("read stderr");
        // Loading starts right after the listener is up.
        let listening = line.contains("listening: MCP at");
        seen.push(line);
        if listening {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.contains("listening: MCP at")),
        "{seen:?}"
    );
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    // Wait on the exit with a deadline, far shorter than the hour of loading.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "SIGTERM during loading did not stop the server:\n{}",
                seen.join("\n")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    seen.extend(lines.map_while(Result::ok));
    let log = seen.join("\n");
    assert!(status.success(), "{status}:\n{log}");
    assert!(
        log.contains("stopped before the plugins finished loading"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

/// What a plugin prints is data: one escaped log event per stream and call, cut at
/// 64 KiB with the rest counted, never a line of its own on the operator log and
/// never on the audit stream (stdout when serving HTTP).
#[test]
fn plugin_output_is_logged_as_data_and_never_forges_a_line() {
    let dir = plugin_folder("plugin-output", &[test_plugin("hostile")]);
    let server = HttpServer::start(&[
        "--allow-all",
        "--plugins",
        dir.to_str().expect("utf-8 path"),
    ]);
    let forged = "{\"subject\":\"admin\",\"capability\":\"records.lookup\",\"decision\":\"allow\"}";
    let times = 2000;
    let program = format!(
        "def main():\n    return hostile.shout(line={}, times={times})",
        serde_json::to_string(&format!("{forged}\u{1b}[2J")).expect("a Starlark string")
    );
    assert_eq!(
        crate::support::execute_http(server.port, &program),
        Ok(json!({"ok": true}))
    );
    wait_for_log(&server, "plugin output", 2);
    wait_for_audit(&server, "\"capability\":\"hostile.shout\"", 1);
    let (log, audit) = (server.log(), server.audit());
    // The audit stream holds the one call, for the local subject.
    let audit: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not audit JSON: {l}")))
        .collect();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["subject"], "local");
    assert_eq!(audit[0]["capability"], "hostile.shout");
    // No line of the log is the plugin's: each starts with a timestamp, and the
    // terminal escape is written out, not sent.
    assert!(
        log.lines().all(|l| l.starts_with("20")),
        "a line the plugin started:\n{log}"
    );
    assert!(!log.contains('\u{1b}'), "a raw escape in the log");
    let line_bytes = forged.len() + "\u{1b}[2J\n".len();
    let dropped = times * line_bytes - 64 * 1024;
    let escaped = format!("{forged}\u{1b}[2J\n");
    let escaped = format!("{escaped:?}");
    let stdout = log
        .lines()
        .find(|l| l.contains("stream=\"stdout\""))
        .unwrap_or_else(|| panic!("no stdout event:\n{log}"));
    assert!(
        stdout.contains(&format!(
            "plugin output plugin=hostile.wasm capability=hostile.shout execution=1 stream=\"stdout\" dropped_bytes={dropped} output={}",
            &escaped[..escaped.len() - 1]
        )),
        "{stdout}"
    );
    assert!(
        log.lines().any(|l| l.ends_with(&format!(
            "plugin output plugin=hostile.wasm capability=hostile.shout execution=1 stream=\"stderr\" dropped_bytes=0 output={escaped}"
        ))),
        "{log}"
    );
}

/// Over HTTP every request is an MCP session of its own, and rmcp logs three INFO
/// lines per session (one a Debug dump of the client's parameters): at the default
/// `--log info` they are not written; a filter naming rmcp gets them back.
#[test]
fn the_default_log_has_no_line_per_request_from_the_mcp_library() {
    let plugins = plugin_folder("http-quiet-sessions", &example_plugin_files());
    let plugins = plugins.to_str().expect("utf-8 path");
    const SESSION: &str = "Service initialized as server";
    for (log, sessions) in [(None, 0), (Some("info,rmcp=info"), 3)] {
        let mut args = vec!["--allow-all", "--no-watch", "--plugins", plugins];
        if let Some(log) = log {
            args.extend(["--log", log]);
        }
        let server = HttpServer::start(&args);
        for _ in 0..2 {
            assert_eq!(
                crate::support::execute_http(server.port, "def main():\n    return 1"),
                Ok(json!(1))
            );
        }
        // A failed execution's own line marks that the requests before it were
        // handled (each session's first line comes before its answer).
        assert_eq!(
            crate::support::execute_http(server.port, "def main():\n    fail(\"mark\")"),
            Err("invalid program: runtime error at <codemode>:2:5: fail: mark".to_owned())
        );
        wait_for_log(&server, "execution failed", 1);
        let logged = server.log();
        assert_eq!(logged.matches(SESSION).count(), sessions, "{logged}");
        assert_eq!(
            logged.matches("input stream terminated").count() > 0,
            sessions > 0,
            "{logged}"
        );
    }
}

#[test]
fn with_tokens_readyz_and_metrics_need_one_but_healthz_and_metrics_listen_do_not() {
    // fetch's sidecar names a host folder that does not exist: the plugin is left
    // out, and its reason named the host's absolute path on /readyz.
    let files = vec![crate::support::example_plugins().join("fetch.wasm")];
    let plugins = plugin_folder("http-probes-tokens", &files);
    std::fs::write(
        plugins.join("fetch.toml"),
        "[[dirs]]\nhost = \"/nonexistent-codemode/secret/cache\"\nguest = \"/cache\"\n",
    )
    .expect("write the sidecar");
    let server = HttpServer::allowing(
        &plugins,
        &[
            "--tokens",
            &tokens_file("http-probes-tokens"),
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let metrics_port = metrics_listen_port(&server);
    let auth = format!("Bearer {GUEST_TOKEN}");
    let with_token = [("Authorization", auth.as_str())];
    let wrong = [("Authorization", "Bearer not-a-token")];
    let health = raw_request(server.port, "GET", "/healthz", &[], "");
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    for path in ["/readyz", "/metrics"] {
        // Before, both answered anyone who could reach --listen.
        let refused = raw_request(server.port, "GET", path, &[], "");
        assert_eq!(refused.status, 401, "{path}");
        assert_eq!(
            refused.header("www-authenticate"),
            Some("Bearer realm=\"codemode-host\""),
            "{path}"
        );
        assert_eq!(
            raw_request(server.port, "GET", path, &wrong, "").status,
            401,
            "{path}"
        );
        assert_eq!(
            raw_request(server.port, "GET", path, &with_token, "").status,
            200,
            "{path}"
        );
        // The orchestrator's address needs none.
        assert_eq!(
            raw_request(metrics_port, "GET", path, &[], "").status,
            200,
            "{path}"
        );
    }
    let ready = raw_request(server.port, "GET", "/readyz", &with_token, "");
    assert_eq!(
        ready.body,
        "ready\nplugins left out:\n  fetch.wasm: sidecar `fetch.toml`: dirs: host directory `cache` does not exist or is not a directory\n"
    );
}

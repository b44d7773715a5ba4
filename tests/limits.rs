//! Which limit fired: every `resource limit exceeded` answer of `execute` carries,
//! in `_meta["codemode/stats"]["limit"]`, the flag of the budget that ran out (or
//! the plugin's sidecar setting), never its value; the fixed text stays exactly as
//! it is, and the error carries the same stats as a success. Driven over Streamable
//! HTTP, one program per budget.

use serde_json::{Value, json};

use crate::support::{
    HttpServer, call_tool, example_plugins, plugin_folder, raw_request, test_plugin, wait_for_log,
};

/// `execute` of `source`: the error text (or `None` on success) and the stats.
fn execute(server: &HttpServer, source: &str) -> (Option<String>, Value) {
    let result = call_tool(server.port, "execute", json!({ "source": source }));
    let text = (result["isError"] == true).then(|| {
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    (text, result["_meta"]["codemode/stats"].clone())
}

/// A server over the hostile, sleepy and text plugins with small budgets, and a
/// sidecar giving `hostile.wasm` caps of its own when `capped`.
fn server(label: &str, capped: bool) -> HttpServer {
    let dir = plugin_folder(
        label,
        &[
            test_plugin("hostile"),
            test_plugin("sleepy"),
            example_plugins().join("text.wasm"),
        ],
    );
    if capped {
        std::fs::write(
            dir.join("hostile.toml"),
            "max_fuel_per_call = 50000000\nmax_memory = \"8MiB\"\n",
        )
        .expect("write the sidecar");
    }
    HttpServer::allowing(
        &dir,
        &[
            "--max-source-bytes",
            "4096",
            "--max-execution-steps",
            "5000",
            "--max-execution-time",
            "2s",
            "--max-native-calls",
            "3",
            "--max-value-depth",
            "8",
            "--max-value-bytes",
            "2000",
            "--max-intermediate-value-bytes",
            "3000",
            "--max-fuel",
            "300000000",
            "--max-memory",
            "64MiB",
        ],
    )
}

#[test]
fn every_resource_limit_names_its_budget() {
    let server = server("limits-global", false);
    let fill = "text.fill(template='x' * 1200, values={})";
    let cases = [
        (
            "--max-source-bytes",
            format!("def main():\n    return '{}'", "a".repeat(4100)),
        ),
        (
            "--max-execution-steps",
            "def main():\n    t = 0\n    for i in range(100000):\n        t += i\n    return t"
                .to_owned(),
        ),
        (
            "--max-execution-time",
            "def main():\n    return sleepy.nap(ms=600000)".to_owned(),
        ),
        (
            "--max-native-calls",
            "def main():\n    for i in range(4):\n        sleepy.nap(ms=1)\n    return 1"
                .to_owned(),
        ),
        (
            "--max-value-depth",
            format!(
                "def main():\n    return {}1{}",
                "[".repeat(9),
                "]".repeat(9)
            ),
        ),
        (
            "--max-value-bytes",
            "def main():\n    return 'a' * 2500".to_owned(),
        ),
        (
            "--max-intermediate-value-bytes",
            format!(
                "def main():\n    n = 0\n    for i in range(3):\n        n += len({fill}['text'])\n    return n"
            ),
        ),
        (
            "--max-fuel",
            "def main():\n    return hostile.spin()".to_owned(),
        ),
        (
            "--max-memory",
            "def main():\n    return hostile.hog()".to_owned(),
        ),
        // Past the interpreter's address space: no allocation is even tried.
        (
            "--max-memory",
            "def main():\n    return len('abc' * 1000000000)".to_owned(),
        ),
        // Nested too deeply for the parser, before the depth check can refuse it:
        // no flag raises that.
        (
            "interpreter stack",
            format!("def main():\n    return {}1", "-".repeat(3000)),
        ),
    ];
    for (flag, source) in &cases {
        let (error, stats) = execute(&server, source);
        assert_eq!(
            error.as_deref(),
            Some("resource limit exceeded"),
            "{flag}: {stats}"
        );
        assert_eq!(stats["limit"], json!(flag), "{flag}: {stats}");
        // The same stats as a success, elapsed time included.
        assert!(stats["elapsed_us"].as_u64().is_some(), "{flag}: {stats}");
    }
    // A success names no limit; other errors carry stats without one.
    let (error, stats) = execute(
        &server,
        &format!("def main():\n    return len({fill}['text'])"),
    );
    assert_eq!(error, None);
    assert_eq!(stats.get("limit"), None, "{stats}");
    assert_eq!(stats["native_calls"], json!(1));
    let (error, stats) = execute(&server, "def main():\n    return nope.nothing()");
    assert_eq!(
        error.as_deref(),
        Some("invalid program: <codemode>:2:12: Variable `nope` not found, did you mean `None`?")
    );
    assert_eq!(stats.get("limit"), None, "{stats}");
    // The operator learns it too: one line per failed execution.
    wait_for_log(
        &server,
        "execution failed subject=local outcome=\"resource limit exceeded\" limit=\"--max-memory\"",
        1,
    );
}

#[test]
fn a_plugin_s_own_caps_are_named_by_their_sidecar_setting() {
    let server = server("limits-sidecar", true);
    for (setting, program) in [
        ("max_fuel_per_call", "hostile.spin()"),
        ("max_memory", "hostile.hog()"),
    ] {
        let (error, stats) = execute(&server, &format!("def main():\n    return {program}"));
        assert_eq!(
            error.as_deref(),
            Some("resource limit exceeded"),
            "{program}"
        );
        assert_eq!(stats["limit"], json!(setting), "{program}: {stats}");
    }
}

#[test]
fn an_error_from_a_native_call_names_the_capability_and_where_it_was_called() {
    let server = server("limits-calls", false);
    let cases = [
        (
            "def main():\n    x = 1\n    return text.fill(template=x, values={})",
            "invalid capability arguments: argument \"template\" must be a string",
            json!({"capability": "text.fill", "line": 3, "column": 12}),
        ),
        (
            "def helper(n):\n    return text.fill(template=n, values={})\n\ndef main():\n    return helper(1)",
            "invalid capability arguments: argument \"template\" must be a string",
            json!({"capability": "text.fill", "line": 2, "column": 12}),
        ),
        (
            "def main():\n    for i in range(4):\n        sleepy.nap(ms=1)\n    return 1",
            "resource limit exceeded",
            json!({"capability": "sleepy.nap", "line": 3, "column": 9}),
        ),
        (
            "def main():\n    return [hostile.spin()]",
            "resource limit exceeded",
            json!({"capability": "hostile.spin", "line": 2, "column": 13}),
        ),
    ];
    for (source, text, call) in cases {
        let result = call_tool(server.port, "execute", json!({ "source": source }));
        assert_eq!(result["content"][0]["text"], json!(text), "{source}");
        assert_eq!(result["_meta"]["codemode/error"], call, "{source}");
    }
    // An error of the program itself names no call.
    let result = call_tool(
        server.port,
        "execute",
        json!({ "source": "def main():\n    return 1 // 0" }),
    );
    assert_eq!(result["isError"], json!(true));
    assert_eq!(result["_meta"].get("codemode/error"), None, "{result}");
    wait_for_log(
        &server,
        "limit=\"--max-fuel\" capability=\"hostile.spin\"",
        1,
    );
    // The call refused for the call budget is counted under its capability, beside
    // the three before it.
    let metrics = raw_request(server.port, "GET", "/metrics", &[], "");
    for line in [
        "codemode_native_calls_total{capability=\"sleepy.nap\",outcome=\"ok\"} 3",
        "codemode_native_calls_total{capability=\"sleepy.nap\",outcome=\"resource limit exceeded\"} 1",
    ] {
        assert!(metrics.body.contains(line), "{line} in\n{}", metrics.body);
    }
}

/// The most memory `pid` has had resident (`VmHWM`), in bytes.
fn peak_resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

#[test]
fn concurrent_executions_share_max_total_memory() {
    // Eight executions at once, each hoarding up to its 256 MiB: before
    // --max-total-memory, the server's peak grew by 1.5 GB (2 GiB when all
    // overlap); now the sandboxes together stop at 512 MiB, and the executions
    // that found no room end naming the total.
    let plugins = plugin_folder("total-memory", &[test_plugin("hostile")]);
    let server = HttpServer::allowing(
        &plugins,
        &[
            "--no-watch",
            "--max-concurrent-executions",
            "8",
            "--max-execution-time",
            "60s",
            "--max-total-memory",
            "512MiB",
        ],
    );
    let before = peak_resident(server.pid());
    let port = server.port;
    let limits: Vec<(Option<String>, Value)> = std::thread::scope(|scope| {
        let hogs: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let result = call_tool(
                        port,
                        "execute",
                        json!({"source": "def main():\n    return hostile.hog()"}),
                    );
                    let text = result["content"][0]["text"].as_str().map(str::to_owned);
                    (text, result["_meta"]["codemode/stats"]["limit"].clone())
                })
            })
            .collect();
        hogs.into_iter()
            .map(|hog| hog.join().expect("a hog's thread"))
            .collect()
    });
    let grown = peak_resident(server.pid()).saturating_sub(before);
    for (text, limit) in &limits {
        assert_eq!(text.as_deref(), Some("resource limit exceeded"));
        assert!(
            *limit == json!("--max-total-memory") || *limit == json!("--max-memory"),
            "{limit}"
        );
    }
    assert!(
        limits
            .iter()
            .any(|(_, limit)| *limit == json!("--max-total-memory")),
        "eight hogs of 256 MiB cannot all fit in 512 MiB: {limits:?}"
    );
    // The total, plus the host's own working memory (values, stacks, buffers).
    assert!(
        grown < (512 + 192) << 20,
        "the peak grew by {} MiB",
        grown >> 20
    );
    // Every reservation came back: a second round finds the same room.
    let (text, stats) = execute(&server, "def main():\n    return hostile.hog()");
    assert_eq!(text.as_deref(), Some("resource limit exceeded"));
    assert_eq!(stats["limit"], "--max-memory", "one hog alone fits");
    let metrics = raw_request(server.port, "GET", "/metrics", &[], "");
    let reserved: Option<u64> = metrics
        .body
        .lines()
        .find_map(|line| line.strip_prefix("codemode_sandbox_memory_bytes "))
        .and_then(|value| value.parse().ok());
    assert!(
        reserved.is_some_and(|bytes| bytes <= 512 << 20),
        "{}",
        metrics.body
    );
}

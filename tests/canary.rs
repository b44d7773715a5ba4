//! No host detail reaches the agent: every failure path of `execute`, run on a
//! server whose plugin files, folders and policy path carry a canary and whose
//! budgets and grants have values found nowhere else, answers its fixed text, and
//! neither the answer nor its `_meta` error names a file, a path or a budget value.
//! The operator log names them all (so the canaries were in play).

use serde_json::json;

use crate::grants::Upstream;
use crate::support::{HttpServer, call_tool, example_plugins, plugin_folder, test_plugin};

/// In every plugin file name, the folder's path and the policy's path.
const CANARY: &str = "CANARY";
/// Budget and grant values that must not appear in an answer: the flags below and
/// the sidecars' `timeout` and `max_fuel_per_call`.
const VALUES: [&str; 5] = ["3917", "4111", "70001", "731", "1234567"];

/// Renames `dir/<name>.wasm` to `dir/CANARY-file-<name>.wasm`.
fn canary_name(dir: &std::path::Path, name: &str) -> String {
    let stem = format!("{CANARY}-file-{name}");
    std::fs::rename(
        dir.join(format!("{name}.wasm")),
        dir.join(format!("{stem}.wasm")),
    )
    .expect("rename the plugin");
    stem
}

#[test]
fn no_failure_path_shows_a_file_a_path_or_a_budget_value() {
    let upstream = Upstream::start();
    let examples = example_plugins();
    let dir = plugin_folder(
        "canary-CANARY-dir",
        &[
            examples.join("records.wasm"),
            examples.join("fetch.wasm"),
            test_plugin("hostile"),
        ],
    );
    for name in ["records", "fetch", "hostile"] {
        let stem = canary_name(&dir, name);
        let sidecar = match name {
            "fetch" => "allowed_outbound_hosts = [\"http://127.0.0.1:*\"]\ntimeout = \"731ms\"\n",
            "hostile" => "max_fuel_per_call = 1234567\n",
            _ => continue,
        };
        std::fs::write(dir.join(format!("{stem}.toml")), sidecar).expect("write a sidecar");
    }
    let policy = dir.join("CANARY-policy.rego");
    std::fs::write(
        &policy,
        "package codemode.authz\n\ndefault allow := false\n\n\
         allow if input.capability.name == \"records.lookup\"\n\
         allow if startswith(input.capability.name, \"web.\")\n\
         allow if startswith(input.capability.name, \"hostile.\")\n\
         allow if {\n    input.capability.name == \"records.query\"\n    count(numbers.range(1, input.arguments.limit)) >= 0\n}\n",
    )
    .expect("write the policy");
    let server = HttpServer::start(&[
        "--plugins",
        dir.to_str().expect("utf-8 path"),
        "--policy",
        policy.to_str().expect("utf-8 path"),
        "--max-execution-time",
        "3917ms",
        "--max-native-calls",
        "4111",
        "--max-value-bytes",
        "70001",
    ]);
    // A port nothing listens on: the connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let slow = upstream.port;
    let cases: Vec<(String, &str)> = vec![
        ("def main(:\n    return 1".into(), "invalid program: <codemode>:1:10: Parse error: unexpected symbol ':', expected identifier"),
        ("def main():\n    return 1 // 0".into(), "invalid program: runtime error at <codemode>:2:12: Floor division by zero: 1 // 0"),
        ("def main():\n    return nosuch.thing()".into(), "invalid program: <codemode>:2:12: Variable `nosuch` not found"),
        ("def main():\n    return records.nosuch()".into(), "invalid program: runtime error at <codemode>:2:12: unknown capability `records.nosuch` (find names with search_api)"),
        ("def main():\n    return records.lookup(nope=1)".into(), "invalid capability arguments: unknown argument \"nope\""),
        ("def main():\n    return records.find(fields={})".into(), "permission denied"),
        ("def main():\n    return records.query(filter={}, tags=[], limit=2000000000)".into(), "authorization policy failure"),
        ("def main():\n    return hostile.crash()".into(), "capability failed"),
        ("def main():\n    return hostile.spin()".into(), "resource limit exceeded"),
        ("def main():\n    return hostile.hog()".into(), "resource limit exceeded"),
        ("def main():\n    return web.get(url=\"http://localhost:1/\")".into(), "capability failed: outbound host http://localhost:1 is not allowed"),
        (format!("def main():\n    return web.get(url=\"http://127.0.0.1:{closed}/\")"), ""),
        (format!("def main():\n    return web.get(url=\"http://127.0.0.1:{slow}/slow\")"), "capability failed: web.get timed out"),
        ("def main():\n    for i in range(5000):\n        records.lookup(key=\"bk-0001\")\n    return 1".into(), "resource limit exceeded"),
        ("def main():\n    return \"x\" * 80000".into(), "resource limit exceeded"),
        ("def main():\n    n = 0\n    for i in range(1000000000):\n        n += 1\n    return n".into(), "resource limit exceeded"),
    ];
    let refused = format!(
        "capability failed: GET http://127.0.0.1:{closed}/ failed: the connection was refused"
    );
    let mut wrong = Vec::new();
    for (program, expected) in &cases {
        let result = call_tool(server.port, "execute", json!({ "source": program }));
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        let expected = if expected.is_empty() {
            &refused
        } else {
            *expected
        };
        if text != expected {
            wrong.push(format!(
                "{program}\n  expected {expected:?}\n  answered {text:?}"
            ));
        }
        let error = &result["_meta"]["codemode/error"];
        for shown in [text.to_owned(), error.to_string()] {
            // The ports the test chose are the program's own words, not a
            // budget's value (41117 holds 4111).
            let shown = shown
                .replace(&closed.to_string(), "<port>")
                .replace(&slow.to_string(), "<port>");
            assert!(!shown.contains(CANARY), "{program}: a canary in {shown}");
            for value in VALUES {
                assert!(!shown.contains(value), "{program}: `{value}` in {shown}");
            }
        }
        assert!(
            !result.to_string().contains(CANARY),
            "{program}: a canary in {result}"
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The log, read by the operator, names the files the answers did not.
    let log = server.log();
    for stem in ["records", "fetch", "hostile"] {
        assert!(
            log.contains(&format!("{CANARY}-file-{stem}.wasm")),
            "{stem} not in the log:\n{log}"
        );
    }
}

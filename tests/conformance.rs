//! Third-party Node clients: the official MCP conformance suite against the HTTP
//! server, and the MCP Inspector CLI listing the tools over stdio and HTTP.

use std::process::Command;

use serde_json::Value;

use crate::support::{
    HttpServer, cache_dir, example_plugin_files, host_bin, node_tools, plugin_folder, root,
};

/// The protocol revisions whose requirement sets the suite runs, each with the
/// baseline of scenarios this server fails by design (`tests/conformance/`: why,
/// for each one).
const REVISIONS: [&str; 2] = ["2025-11-25", "2026-07-28"];

fn examples_over_http(label: &str, extra: &[&str]) -> HttpServer {
    let plugins = plugin_folder(label, &example_plugin_files());
    let mut args = vec!["--plugins", plugins.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    HttpServer::start(&args)
}

/// Every scored scenario of each revision's requirement set passes, except those
/// its baseline lists; one of those that starts passing fails too (stale).
#[test]
fn the_conformance_suite_passes_every_requirement_this_server_can_meet() {
    let tools = node_tools();
    let server = examples_over_http("conformance", &["--allow-all"]);
    for revision in REVISIONS {
        let results = root().join("target/test-cache/conformance").join(revision);
        let baseline = root()
            .join("tests/conformance")
            .join(format!("expected-failures-{revision}.yaml"));
        let out = Command::new(&tools.node)
            .arg(&tools.conformance)
            .args(["server", "--url", &server.url(), "--requirements", revision])
            .arg("--expected-failures")
            .arg(&baseline)
            .arg("-o")
            .arg(&results)
            .output()
            .expect("run the conformance suite");
        assert!(
            out.status.success(),
            "conformance requirements {revision} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Runs `mcp-inspector --cli --method tools/list` against `target` (a URL, or `--`
/// and a command line) and returns the tool names.
fn inspector_tools(target: &[String], headers: &[&str]) -> Vec<String> {
    let tools = node_tools();
    let mut command = Command::new(&tools.node);
    command.arg(&tools.inspector).args([
        "--cli",
        "--format",
        "json",
        "-q",
        "--method",
        "tools/list",
    ]);
    command.args(target);
    // After the target: `--header` takes several values and would swallow a URL.
    for header in headers {
        command.args(["--header", header]);
    }
    let out = command.output().expect("run the MCP Inspector");
    assert!(
        out.status.success(),
        "inspector failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).expect("inspector prints JSON");
    listed["result"]["tools"]
        .as_array()
        .expect("a tools list")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn the_inspector_lists_the_three_tools_over_stdio_and_http() {
    let expected = ["search_api", "describe_api", "execute"];
    let plugins = plugin_folder("inspector-stdio", &example_plugin_files());
    let stdio = [
        "--".to_owned(),
        host_bin().to_owned(),
        "--plugins".to_owned(),
        plugins.to_str().expect("utf-8 path").to_owned(),
        "--cache-dir".to_owned(),
        cache_dir().to_owned(),
    ];
    assert_eq!(inspector_tools(&stdio, &[]), expected);

    let token = "inspector-token-5e1";
    let tokens = root().join("target/test-cache/tokens/inspector.tokens");
    std::fs::create_dir_all(tokens.parent().expect("parent")).expect("create the tokens folder");
    std::fs::write(
        &tokens,
        format!("inspector {}\n", codemode_server::authz::token_hash(token)),
    )
    .expect("write the tokens file");
    let server = examples_over_http(
        "inspector-http",
        &[
            "--allow-all",
            "--tokens",
            tokens.to_str().expect("utf-8 path"),
        ],
    );
    let header = format!("Authorization: Bearer {token}");
    assert_eq!(inspector_tools(&[server.url()], &[&header]), expected);
}

//! What the gateway adds to an upstream MCP server's own time: the same tool called
//! by an MCP client directly, and from a program through `execute` (binding,
//! authorization, audit, the shared session), each over its own child.
//!
//! The upstream is the server binary itself (`codemode-host` over stdio, serving
//! the examples), and the tool `describe_api`: a fast, deterministic answer, so the
//! difference is the execute path and not the tool.

use std::path::Path;
use std::time::{Duration, Instant};

use codemode_server::{Service, UpstreamConfig, UpstreamTransport};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

use crate::server::host_binary;
use crate::{Row, bench_config, execute, percentiles, runtime, us};

/// Calls of each kind measured (after as many to warm up).
const ROUNDS: usize = 400;

/// The program calling the upstream's tool once.
const PROGRAM: &str = "def main():\n    return inner.describe_api(name=\"stats.summary\")\n";

/// The upstream's command line: the server binary over stdio, on the examples.
fn command(root: &Path, plugins: &Path) -> Vec<String> {
    [
        host_binary().display().to_string(),
        "--plugins".to_owned(),
        plugins.display().to_string(),
        "--cache-dir".to_owned(),
        root.join("target/test-cache").display().to_string(),
        "--no-watch".to_owned(),
        "--log".to_owned(),
        "warn".to_owned(),
    ]
    .to_vec()
}

/// p50 of `ROUNDS` direct `tools/call`s from an rmcp client.
fn direct(root: &Path, plugins: &Path) -> Duration {
    let runtime = runtime();
    runtime.block_on(async {
        let argv = command(root, plugins);
        let mut child = tokio::process::Command::new(&argv[0]);
        child.args(&argv[1..]);
        let transport = TokioChildProcess::new(child)
            .unwrap_or_else(|error| panic!("cannot start the upstream: {error}"));
        let client = ()
            .serve(transport)
            .await
            .unwrap_or_else(|error| panic!("cannot initialize the upstream: {error}"));
        let mut times = Vec::with_capacity(ROUNDS);
        for round in 0..2 * ROUNDS {
            let mut params = CallToolRequestParams::new("describe_api");
            params.arguments = serde_json::json!({"name": "stats.summary"})
                .as_object()
                .cloned();
            let started = Instant::now();
            let result = client
                .call_tool(params)
                .await
                .unwrap_or_else(|error| panic!("describe_api failed: {error}"));
            assert_ne!(result.is_error, Some(true), "{result:?}");
            if round >= ROUNDS {
                times.push(started.elapsed());
            }
        }
        let _ = client.cancel().await;
        percentiles(&mut times).0
    })
}

/// p50 of `ROUNDS` executes calling the tool once, and of as many trivial ones.
fn through_execute(root: &Path, plugins: &Path) -> (Duration, Duration) {
    let config = codemode_server::ServiceConfig {
        upstreams: vec![UpstreamConfig {
            name: "inner".to_owned(),
            transport: UpstreamTransport::Command {
                command: command(root, plugins),
                env: std::collections::BTreeMap::new(),
                cwd: None,
            },
            timeout: None,
            tools: None,
        }],
        ..bench_config(root, plugins)
    };
    let service = match Service::load(&config) {
        Ok(service) => service,
        Err(error) => panic!("cannot load the service: {error}"),
    };
    let runtime = runtime();
    let measure = |source: &str| {
        let mut times = Vec::with_capacity(ROUNDS);
        for round in 0..2 * ROUNDS {
            let (elapsed, stats) = execute(&runtime, &service, source);
            assert!(stats.native_calls <= 1);
            if round >= ROUNDS {
                times.push(elapsed);
            }
        }
        percentiles(&mut times).0
    };
    let called = measure(PROGRAM);
    let trivial = measure("def main():\n    return 1\n");
    service.close_upstreams();
    (called, trivial)
}

/// The measurement and its row: the execute path's time beyond a direct call and a
/// trivial execute.
pub(crate) fn measure(root: &Path, plugins: &Path, rows: &mut Vec<Row>) {
    let direct = direct(root, plugins);
    let (called, trivial) = through_execute(root, plugins);
    let added = called.saturating_sub(direct);
    println!(
        "upstream describe_api: direct p50 {:.0} µs, in execute p50 {:.0} µs (a trivial execute {:.0} µs): the execute path adds {:.0} µs",
        us(direct),
        us(called),
        us(trivial),
        us(added)
    );
    rows.push(Row {
        what: "upstream call: execute beyond direct",
        measured: format!("{:.0} µs", us(added)),
        target: "≤ 100 µs",
        ratio: Some(us(added) / 100.0),
    });
}

//! Hostile upstream MCP servers stay contained, end to end: the real binary with
//! `tests/upstreams/hostile.py` (a hand-written MCP server sending what no SDK
//! would) as an `[[upstream]]` child, beside a plugin that waits in host calls.

use std::path::PathBuf;

use serde_json::json;

use crate::support::{HttpServer, execute_http, plugin_folder, python, root, test_plugin};

/// A config serving the test plugin `sleepy` and `hostile.py` as upstream `hostile`
/// in `HOSTILE_MODE` `mode`, in a fresh folder of the test `label`; `extra` is added
/// to the upstream's table. Returns the config and the upstream's log.
fn hostile_config(label: &str, mode: &str, extra: &str) -> (PathBuf, PathBuf) {
    hostile_config_with(label, &["sleepy"], "allow-all = true", mode, extra)
}

/// [`hostile_config`] in the `gated` mode: the upstream answers `initialize`
/// only once the returned gate file exists.
fn gated_config(label: &str) -> (PathBuf, PathBuf) {
    let (config, _) = hostile_config(label, "gated", "");
    let gate = config.with_file_name("gate");
    let text = std::fs::read_to_string(&config).expect("read the config");
    let text = text.replace(
        "HOSTILE_MODE = \"gated\"",
        &format!(
            "HOSTILE_MODE = \"gated\", HOSTILE_GATE = {:?}",
            gate.display().to_string()
        ),
    );
    std::fs::write(&config, text).expect("write the config");
    (config, gate)
}

/// [`hostile_config`] with the test plugins `plugins` and the top-level settings
/// `settings` (how calls are authorized).
fn hostile_config_with(
    label: &str,
    plugins: &[&str],
    settings: &str,
    mode: &str,
    extra: &str,
) -> (PathBuf, PathBuf) {
    let dir = root().join("target/e2e-hostile").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the config folder");
    let log = dir.join("hostile.log");
    let files: Vec<PathBuf> = plugins.iter().map(|p| test_plugin(p)).collect();
    let plugins = plugin_folder(&format!("hostile-{label}"), &files);
    let config = dir.join("codemode.toml");
    let text = format!(
        "plugins = {:?}\n{settings}\n\n[[upstream]]\nname = \"hostile\"\ncommand = [{:?}, {:?}]\nenv = {{ HOSTILE_MODE = {mode:?}, HOSTILE_LOG = {:?} }}\n{extra}",
        plugins.display().to_string(),
        python().display().to_string(),
        root()
            .join("tests/upstreams/hostile.py")
            .display()
            .to_string(),
        log.display().to_string(),
    );
    std::fs::write(&config, text).expect("write the config");
    (config, log)
}

/// The log lines of `log` that contain every one of `needles`.
fn lines_with<'a>(log: &'a str, needles: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|line| needles.iter().all(|n| line.contains(n)))
        .collect()
}

#[test]
fn schema_bombs_are_skipped_and_the_rest_of_the_upstream_serves() {
    let (config, _) = hostile_config("bombs", "bomb,wide", "");
    // Before the budget, the reference bomb grew the server by ~500 MB/s until it
    // was killed, and never got ready.
    let server = HttpServer::start(&["--config", config.to_str().expect("utf-8")]);
    // Skipped as the upstream lists its tools, after the server is ready.
    crate::support::wait_for_log(&server, "catalog updated for an upstream", 1);
    let log = server.log();
    for tool in ["bomb", "wide"] {
        assert_eq!(
            lines_with(
                &log,
                &[
                    "WARN",
                    "upstream=hostile",
                    &format!("tool={tool} "),
                    "its schemas describe more than 10000 types or 1 MiB of names and values",
                    "upstream tool skipped",
                ]
            )
            .len(),
            1,
            "{log}"
        );
    }
    assert_eq!(
        execute_http(
            server.port,
            "def main():\n    return [hostile.echo(text=\"hi\"), sleepy.nap(ms=1)]"
        ),
        Ok(json!([{"content": [], "text": "hi"}, {"ms": 1}]))
    );
    assert_eq!(
        execute_http(server.port, "def main():\n    return hostile.bomb()"),
        Err(
            "invalid program: runtime error at <codemode>:2:12: unknown capability `hostile.bomb` (find names with search_api)"
                .to_owned()
        )
    );
}

#[test]
fn a_plugin_cannot_take_an_upstreams_root_or_an_upstream_id() {
    // The test plugin `hostile` serves `hostile.*`, the root of the upstream;
    // `squatter` serves `squat.echo` under the ID `mcp:hostile/echo`. Before, the
    // plugin kept the root and the upstream was refused, and the squatter's code
    // ran wherever a policy allowed the upstream tool's ID.
    let (config, _) = hostile_config_with(
        "reserved",
        &["sleepy", "hostile", "squatter"],
        "allow-all = true",
        "",
        "",
    );
    let server = HttpServer::start(&["--config", config.to_str().expect("utf-8")]);
    let log = server.log();
    assert_eq!(
        lines_with(
            &log,
            &[
                "ERROR",
                "source=hostile.wasm",
                "capability name `hostile.spin` is under `hostile`, the root of the configured upstream hostile",
                "source refused",
            ]
        )
        .len(),
        1,
        "{log}"
    );
    assert_eq!(
        lines_with(
            &log,
            &[
                "WARN",
                "plugin=squatter.wasm",
                "capability ID `mcp:hostile/echo` is in the `mcp:` namespace, which only upstream MCP servers' tools use",
                "plugin skipped",
            ]
        )
        .len(),
        1,
        "{log}"
    );
    assert_eq!(
        execute_http(
            server.port,
            "def main():\n    return [hostile.echo(text=\"the upstream\"), sleepy.nap(ms=1)]"
        ),
        Ok(json!([{"content": [], "text": "the upstream"}, {"ms": 1}]))
    );
    let metrics = crate::support::raw_request(server.port, "GET", "/metrics", &[], "").body;
    assert!(
        metrics.contains("codemode_plugin_load_failures_total{plugin=\"squatter.wasm\"} 1"),
        "{metrics}"
    );
}

/// A text meant to forge a log line of its own and clear the operator's terminal,
/// as a Starlark string literal.
const FORGED: &str = r#""no\n2026-12-05T00:00:00.000000Z ERROR codemode_host: forged\x1b[2J""#;

/// Fails the test if a line of `log` other than one with `allowed` holds `needle`,
/// or any line holds a raw escape character.
fn assert_not_forged(log: &str, needle: &str, allowed: &str) {
    for line in log.lines() {
        assert!(
            !line.contains(needle) || line.contains(allowed),
            "a forged line: {line:?}\n{log}"
        );
        assert!(!line.contains('\u{1b}'), "a raw escape: {line:?}");
    }
}

#[test]
fn texts_from_outside_cannot_forge_log_lines() {
    // The policy fails to evaluate (a multi-line Rego error) for `sleepy.nap` and
    // allows the rest.
    let rego = root().join("target/e2e-hostile/forge/authz.rego");
    let (config, _) = hostile_config_with(
        "forge",
        &["sleepy"],
        &format!("policy = [{:?}]", rego.display().to_string()),
        "",
        "",
    );
    std::fs::write(
        &rego,
        "package codemode.authz\n\ndefault allow := false\n\nallow if {\n    input.capability.name != \"sleepy.nap\"\n}\n\nallow if {\n    input.capability.name == \"sleepy.nap\"\n    to_number(\"not\\na number\") > 0\n}\n",
    )
    .expect("write the policy");
    let server = HttpServer::start(&["--config", config.to_str().expect("utf-8")]);
    let port = server.port;
    let call = |capability: &str| {
        execute_http(
            port,
            &format!("def main():\n    return {capability}(text={FORGED})"),
        )
    };
    assert_eq!(
        call("hostile.fail"),
        Err("capability failed: upstream hostile is unavailable".to_owned())
    );
    assert_eq!(
        call("hostile.shout"),
        Ok(json!({"content": [], "text": "ok"}))
    );
    assert_eq!(
        execute_http(port, "def main():\n    return sleepy.nap(ms=1)"),
        Err("authorization policy failure".to_owned())
    );
    crate::support::wait_for_log(&server, "upstream stderr", 1);
    crate::support::wait_for_log(&server, "authorization policy failure", 1);
    let log = server.log();
    assert_not_forged(&log, "forged", "upstream");
    // Before, the upstream's message and the Rego error were written raw: the
    // message's second line began with a timestamp of its own.
    let failed = lines_with(&log, &["WARN", "upstream call failed", "forged"]);
    assert_eq!(failed.len(), 1, "{log}");
    assert!(
        failed[0]
            .contains("no\\n2026-12-05T00:00:00.000000Z ERROR codemode_host: forged\\u{1b}[2J"),
        "{log}"
    );
    let rego_failure = lines_with(
        &log,
        &[
            "WARN",
            "authorization policy failure",
            "capability=sleepy.nap",
        ],
    );
    assert_eq!(rego_failure.len(), 1, "one line: {log}");
    assert!(rego_failure[0].contains("\\n"), "its lines escaped: {log}");
}

#[test]
fn a_flood_of_list_changed_relists_at_most_once_a_second() {
    // The upstream answers every tools/list with 100 more list_changed
    // notifications: before, the server relisted back to back (113 relists and
    // catalog rebuilds in 15 s, 86% of a CPU).
    let (config, log) = hostile_config("flood", "flood", "");
    let server = HttpServer::start(&["--config", config.to_str().expect("utf-8")]);
    let listed = || -> Vec<f64> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.strip_prefix("listed ")?.parse().ok())
            .collect()
    };
    crate::support::wait_until(
        "five tools/list",
        || listed().len() >= 5,
        || format!("{:?}\n{}", listed(), server.log()),
    );
    let times = listed();
    // The first list is the connection's own; relists after it are spaced by the
    // server's interval (1 s), less what the first request's trip took.
    for pair in times[1..].windows(2) {
        assert!(pair[1] - pair[0] >= 0.5, "relists too close: {times:?}");
    }
    assert_eq!(
        execute_http(
            server.port,
            "def main():\n    return hostile.echo(text=\"still\")"
        ),
        Ok(json!({"content": [], "text": "still"}))
    );
}

#[test]
fn trace_logs_carry_no_program_argument_or_result() {
    let (config, _) = hostile_config("trace", "", "");
    let server = HttpServer::start_with_env(
        &["--config", config.to_str().expect("utf-8")],
        &[("RUST_LOG", "trace")],
    );
    assert_eq!(
        execute_http(
            server.port,
            "def main():\n    return hostile.echo(text=\"argument-\" + \"7f3a\")[\"text\"] + \"-result-c41d\""
        ),
        Ok(json!("argument-7f3a-result-c41d"))
    );
    // A failed call logs a WARN after everything the first execution logged: once
    // it is read, so is the rest (one stream, in order).
    assert!(
        execute_http(
            server.port,
            "def main():\n    return hostile.fail(text=\"marker\")"
        )
        .is_err()
    );
    crate::support::wait_for_log(&server, "upstream call failed", 1);
    let log = server.log();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "tracing is on: {log}"
    );
    // Before, rmcp's debug and trace events wrote the request (with the program),
    // the upstream call's arguments and the results.
    for value in ["7f3a", "c41d"] {
        assert!(!log.contains(value), "{value} in the log:\n{log}");
    }
}

/// Whether process `pid` runs (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// The PID `log` (the upstream's) gives after `label ` once it does.
fn logged_pid(log: &std::path::Path, label: &str) -> u32 {
    let prefix = format!("{label} ");
    let find = || -> Option<u32> {
        std::fs::read_to_string(log)
            .ok()?
            .lines()
            .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
    };
    crate::support::wait_until(
        &format!("the upstream to log its {label} PID"),
        || find().is_some(),
        || std::fs::read_to_string(log).unwrap_or_default(),
    );
    find().unwrap_or_default()
}

/// Waits until none of `pids` runs.
fn wait_gone(pids: &[u32], detail: &str) {
    crate::support::wait_until(
        &format!("processes {pids:?} to end"),
        || !pids.iter().any(|&pid| alive(pid)),
        || {
            let running: Vec<_> = pids.iter().filter(|&&p| alive(p)).collect();
            format!("still running: {running:?}\n{detail}")
        },
    );
}

/// Ends `pids` whatever happened (a failed test must not leave them running).
struct Reap(Vec<u32>);

impl Drop for Reap {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

#[test]
fn no_child_or_grandchild_outlives_a_stop() {
    // The upstream starts two grandchildren that ignore SIGTERM, one in its
    // process group and one in a session of its own. Before, both outlived a
    // normal stop.
    let (config, log) = hostile_config("family", "family", "");
    let server = HttpServer::start(&["--config", config.to_str().expect("utf-8")]);
    let pids: Vec<u32> = ["started", "grandchild", "detached"]
        .iter()
        .map(|label| logged_pid(&log, label))
        .collect();
    let _reap = Reap(pids.clone());
    assert!(pids.iter().all(|&pid| alive(pid)), "{pids:?}");
    server.terminate();
    let (code, server_log) = server.wait();
    assert_eq!(code, Some(0), "{server_log}");
    wait_gone(&pids, &server_log);
}

#[test]
fn a_sigkilled_server_takes_its_children_along() {
    // The child stays after its stdin ends, as a server busy elsewhere would.
    let (config, log) = hostile_config("sigkill", "linger", "");
    let server = HttpServer::start(&["--config", config.to_str().expect("utf-8")]);
    let child = logged_pid(&log, "started");
    let _reap = Reap(vec![child]);
    assert!(alive(child));
    server.signal("KILL");
    let (code, server_log) = server.wait();
    assert_eq!(code, None, "killed by the signal");
    // Before, the child lived on (reparented to init) after its server was killed.
    wait_gone(&[child], &server_log);
}

#[test]
fn a_stop_while_an_upstream_connects_ends_its_child() {
    // The upstream answers tools/list only after a minute: the server is still
    // connecting it (not yet serving) when it is told to stop.
    let (config, log) = hostile_config("connecting", "slowlist", "");
    let mut server = std::process::Command::new(crate::support::host_bin())
        .args(crate::support::with_cache(&[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().expect("utf-8"),
        ]))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start codemode-host");
    let child = logged_pid(&log, "started");
    let _reap = Reap(vec![child]);
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let status = server.wait().expect("wait for the server");
    wait_gone(&[child], &format!("server: {status}"));
}

#[test]
fn oversized_deep_and_unterminated_answers_fail_their_call_and_nothing_else() {
    let (config, log) = hostile_config_with(
        "lines",
        &["sleepy"],
        "allow-all = true\nmax-execution-time = \"20s\"",
        "deep",
        "",
    );
    let server = HttpServer::start(&["--config", config.to_str().expect("utf-8")]);
    let port = server.port;
    // A schema nested 300 levels: before, serde's recursion limit lost the whole
    // tool list (the upstream served nothing); now the tool is there, its depth
    // past 32 levels read as `any`.
    let described =
        crate::support::call_tool(port, "describe_api", json!({"name": "hostile.deep"}));
    assert_eq!(
        described["structuredContent"]["signature"],
        format!(
            "hostile.deep(*, x: {}any{})",
            "list[".repeat(31),
            "]".repeat(31)
        ),
        "{described}"
    );
    // 17 MiB: before, dropped by rmcp, and the call waited out its budget.
    assert_eq!(
        execute_http(port, "def main():\n    return hostile.huge()"),
        Err("capability failed: upstream hostile sent a result over 16 MiB".to_owned())
    );
    assert_eq!(
        execute_http(
            port,
            "def main():\n    return hostile.echo(text=\"after huge\")"
        ),
        Ok(json!({"content": [], "text": "after huge"})),
        "the session goes on"
    );
    // Nested past serde's limit: before, the answer could not be read and the call
    // waited out its budget.
    assert_eq!(
        execute_http(port, "def main():\n    return hostile.nested()"),
        Err("capability failed: upstream hostile sent a result nested deeper than 100 levels or holding more than 250000 values".to_owned())
    );
    // Half a line, never ended: the session ends after 5 s (the call fails as
    // unavailable) and the upstream is started again.
    assert_eq!(
        execute_http(port, "def main():\n    return hostile.stall()"),
        Err("capability failed: upstream hostile is unavailable".to_owned())
    );
    crate::support::wait_for_log(
        &server,
        "upstream left a line without its end; restarting it",
        1,
    );
    crate::support::wait_until(
        "the upstream to serve again",
        || {
            execute_http(port, "def main():\n    return hostile.echo(text=\"back\")")
                == Ok(json!({"content": [], "text": "back"}))
        },
        || server.log(),
    );
    let starts = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .matches("started ")
        .count();
    assert_eq!(starts, 2, "started once more after the half line");
}

/// `hostile.py` serving Streamable HTTP in `mode` (with `http`) on a port of its
/// own, ended when dropped. Returns it and its URL.
fn hostile_http(label: &str, mode: &str) -> (Ended, String) {
    let dir = root().join("target/e2e-hostile").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the upstream's folder");
    let port_file = dir.join("port");
    let child = std::process::Command::new(python())
        .arg(root().join("tests/upstreams/hostile.py"))
        .env("HOSTILE_MODE", mode)
        .env("HOSTILE_PORT", &port_file)
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("start hostile.py");
    let ended = Ended(child);
    let mut port = String::new();
    crate::support::wait_until(
        "hostile.py to write its port",
        || {
            port = std::fs::read_to_string(&port_file).unwrap_or_default();
            !port.is_empty()
        },
        String::new,
    );
    (ended, format!("http://127.0.0.1:{port}/mcp"))
}

/// A child process killed and waited for when dropped.
struct Ended(std::process::Child);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_oversized_answer_over_http_fails_its_call_at_once_and_nothing_else() {
    // As a JSON body, and as an SSE event: before, rmcp's refusal was a transport
    // error, and the call failed as `upstream hostile is unavailable`.
    for mode in ["http", "http,sse"] {
        let (_upstream, url) = hostile_http(&format!("http-{}", mode.replace(',', "-")), mode);
        let dir = root().join("target/e2e-hostile/http-server");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("plugins")).expect("create the plugins folder");
        let config = dir.join("codemode.toml");
        std::fs::write(
            &config,
            format!(
                "plugins = \"plugins\"\nallow-all = true\nmax-execution-time = \"20s\"\n\n[[upstream]]\nname = \"hostile\"\nurl = {url:?}\n"
            ),
        )
        .expect("write the config");
        let server = HttpServer::start(&["--config", config.to_str().expect("utf-8")]);
        let port = server.port;
        assert_eq!(
            execute_http(port, "def main():\n    return hostile.huge()"),
            Err("capability failed: upstream hostile sent a result over 16 MiB".to_owned()),
            "{mode}"
        );
        assert_eq!(
            execute_http(
                port,
                "def main():\n    return hostile.echo(text=\"after huge\")"
            ),
            Ok(json!({"content": [], "text": "after huge"})),
            "{mode}: the session goes on"
        );
    }
}

#[test]
fn grandchildren_left_by_a_crashed_upstream_are_ended_and_reaped() {
    // The upstream starts a grandchild in its group and one in a session of its
    // own, then crashes. The one in its group is killed with the group's
    // leftovers; adopted by the server (a subreaper), its zombie must be reaped
    // while the server serves, not pile up until it exits.
    let (config, log) = hostile_config("orphans", "family,crash", "");
    let server = HttpServer::start(&["--config", config.to_str().expect("utf-8")]);
    let grandchild = logged_pid(&log, "grandchild");
    let detached = logged_pid(&log, "detached");
    let _reap = Reap(vec![grandchild, detached, logged_pid(&log, "started")]);
    assert_eq!(
        execute_http(server.port, "def main():\n    return hostile.crash()"),
        Err("capability failed: upstream hostile is unavailable".to_owned())
    );
    crate::support::wait_until(
        "the grandchild to be killed and reaped",
        || !std::path::Path::new(&format!("/proc/{grandchild}")).exists(),
        || {
            std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default()
                + &server.log()
        },
    );
    assert!(
        alive(detached),
        "outside the group, it lives until the server exits"
    );
    server.terminate();
    let (code, server_log) = server.wait();
    assert_eq!(code, Some(0), "{server_log}");
    wait_gone(&[detached], &server_log);
}

/// An upstream still connecting for the first time holds up nothing that does
/// not need it (issue 49): the server is ready and a program naming no upstream
/// runs at once; a program naming it waits for it, and the wait is not the
/// program's time (a wait longer than `--max-execution-time`, then the call
/// runs); past `--startup-wait` such a program fails naming the upstream, and a
/// search answers with what serves.
#[test]
fn a_program_waits_only_for_an_upstream_it_names_and_not_on_its_own_time() {
    let (config, gate) = gated_config("gated");
    let config = config.to_str().expect("utf-8 path").to_owned();
    // Ready while the upstream cannot have connected: its gate is shut.
    let server = HttpServer::start(&["--config", &config, "--max-execution-time", "2s"]);
    assert!(!gate.exists());
    assert_eq!(
        execute_http(server.port, "def main():\n    return sleepy.nap(ms=1)"),
        Ok(json!({"ms": 1}))
    );
    let ready = crate::support::raw_request(server.port, "GET", "/readyz", &[], "");
    assert_eq!(
        (ready.status, ready.body.as_str()),
        (200, "ready\nupstreams down:\n  hostile\n")
    );
    // A program naming it waits; the gate opens past its time budget.
    let port = server.port;
    let waiting = std::thread::spawn(move || {
        execute_http(port, "def main():\n    return hostile.echo(text=\"late\")")
    });
    std::thread::sleep(std::time::Duration::from_millis(2500));
    std::fs::write(&gate, "").expect("open the gate");
    let answer = waiting.join().expect("the waiting execute");
    assert_eq!(answer, Ok(json!({"content": [], "text": "late"})));

    // Past --startup-wait, a program naming it fails, naming it; one that does
    // not runs; a search answers without it.
    let (config, gate) = gated_config("gated-timeout");
    let server = HttpServer::start(&[
        "--config",
        config.to_str().expect("utf-8 path"),
        "--startup-wait",
        "1s",
    ]);
    assert_eq!(
        execute_http(
            server.port,
            "def main():\n    return hostile.echo(text=\"x\")"
        ),
        Err("capability failed: upstream hostile is still starting".to_owned())
    );
    assert_eq!(
        execute_http(server.port, "def main():\n    return 1"),
        Ok(json!(1))
    );
    let found = crate::support::tool_as(server.port, "", "search_api", json!({"query": "echo"}))
        .expect("a search");
    assert_eq!(found["results"], json!([]), "{found}");
    let metrics = crate::support::raw_request(server.port, "GET", "/metrics", &[], "").body;
    assert!(
        metrics
            .lines()
            .any(|line| line == "codemode_executes_total{outcome=\"capability failed\"} 1"),
        "{metrics}"
    );
    assert!(!gate.exists());
}

//! Per-plugin grants end to end: the `fetch` example against an HTTP server the test
//! runs on 127.0.0.1 (allowed host, refused host, timeouts), the `granted` test
//! plugin for env, config and directories, and per-plugin fuel and memory caps.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    HttpServer, example_plugins, execute_http, plugin_folder, startup_log, test_plugin,
    wait_for_audit, wait_for_log,
};

/// A tiny HTTP/1.1 server on 127.0.0.1: `/json` answers at once, `/slow` after 3 s,
/// `/drip` sends its headers at once and its 100-byte body one byte every 200 ms.
/// Counts the requests it received.
pub(crate) struct Upstream {
    pub(crate) port: u16,
    requests: Arc<AtomicUsize>,
}

impl Upstream {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
        let port = listener.local_addr().expect("address").port();
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, Ordering::Relaxed);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                    let mut first = String::new();
                    let _ = reader.read_line(&mut first);
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                    }
                    let path = first.split(' ').nth(1).unwrap_or("/").to_owned();
                    if path == "/drip" {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\nconnection: close\r\n\r\n"
                        );
                        for _ in 0..100 {
                            if stream
                                .write_all(b"x")
                                .and_then(|()| stream.flush())
                                .is_err()
                            {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(200));
                        }
                        return;
                    }
                    if path == "/slow" {
                        std::thread::sleep(Duration::from_secs(3));
                    }
                    let body = r#"{"ok": true, "n": 3}"#;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Self { port, requests }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }
}

/// A folder with `fetch.wasm` and, if given, its sidecar text.
fn fetch_folder(label: &str, sidecar: Option<&str>) -> PathBuf {
    let dir = plugin_folder(label, &[example_plugins().join("fetch.wasm")]);
    if let Some(text) = sidecar {
        std::fs::write(dir.join("fetch.toml"), text).expect("write the sidecar");
    }
    dir
}

fn start(dir: &Path) -> HttpServer {
    HttpServer::allowing(dir, &[])
}

#[test]
fn fetch_reaches_allowed_hosts_only_and_its_timeout_holds() {
    let upstream = Upstream::start();
    let port = upstream.port;
    let dir = fetch_folder(
        "grants-fetch",
        Some("allowed_outbound_hosts = [\"http://127.0.0.1:*\"]\ntimeout = \"500ms\"\n"),
    );
    let server = start(&dir);

    let got = execute_http(
        server.port,
        &format!(
            "def main():\n    r = web.get(url=\"http://127.0.0.1:{port}/json\")\n    return {{\"status\": r[\"status\"], \"type\": r[\"content_type\"], \"n\": json.decode(r[\"body\"])[\"n\"]}}"
        ),
    );
    assert_eq!(
        got,
        Ok(json!({"status": 200, "type": "application/json", "n": 3}))
    );
    assert_eq!(upstream.requests(), 1);

    // Same server, a host name the sidecar does not list: refused before connecting.
    let got = execute_http(
        server.port,
        &format!("def main():\n    return web.get(url=\"http://localhost:{port}/json\")"),
    );
    assert_eq!(
        got,
        Err(format!(
            "capability failed: outbound host http://localhost:{port} is not allowed"
        ))
    );
    assert_eq!(upstream.requests(), 1, "a refused request reached the host");
    // User info in the URL: its host is allowed, but the whole authority would have
    // been connected to (and looked up in DNS as `user@127.0.0.1`).
    let got = execute_http(
        server.port,
        &format!("def main():\n    return web.get(url=\"http://user@127.0.0.1:{port}/json\")"),
    );
    assert_eq!(
        got,
        Err(format!(
            "capability failed: outbound host http://user@127.0.0.1:{port} is not allowed: a URL with user info (`user@`) is refused"
        ))
    );
    assert_eq!(upstream.requests(), 1, "a refused request reached the host");
    // The answer can arrive before the server's stderr is read: wait for the line.
    wait_for_log(
        &server,
        &format!(
            "outbound request refused: not in the plugin's allowed_outbound_hosts plugin=fetch.wasm host=http://localhost:{port}"
        ),
        1,
    );

    // The plugin's timeout (500 ms) ends a call the upstream answers in 3 s.
    let started = Instant::now();
    let got = execute_http(
        server.port,
        &format!("def main():\n    return web.get(url=\"http://127.0.0.1:{port}/slow\")"),
    );
    let elapsed = started.elapsed();
    assert_eq!(got, Err("capability failed: web.get timed out".to_owned()));
    assert!(elapsed < Duration::from_millis(2500), "{elapsed:?}");

    // A shorter timeout the plugin asks for itself is its own failure to report.
    let got = execute_http(
        server.port,
        &format!(
            "def main():\n    return web.get(url=\"http://127.0.0.1:{port}/slow\", timeout_ms=100)"
        ),
    );
    assert_eq!(
        got,
        Err(format!(
            "capability failed: GET http://127.0.0.1:{port}/slow failed: timed out waiting for the response"
        ))
    );
}

#[test]
fn without_a_sidecar_a_plugin_reaches_no_host() {
    let upstream = Upstream::start();
    let port = upstream.port;
    let dir = fetch_folder("grants-fetch-none", None);
    let server = start(&dir);
    let got = execute_http(
        server.port,
        &format!("def main():\n    return web.get(url=\"http://127.0.0.1:{port}/json\")"),
    );
    assert_eq!(
        got,
        Err(format!(
            "capability failed: outbound host http://127.0.0.1:{port} is not allowed"
        ))
    );
    assert_eq!(upstream.requests(), 0);
}

/// `granted.<function>(**arguments)["value"]`.
fn granted(port: u16, call: &str) -> Result<Value, String> {
    execute_http(
        port,
        &format!("def main():\n    return granted.{call}[\"value\"]"),
    )
}

#[test]
fn env_config_and_directories_are_exactly_what_the_sidecar_grants() {
    let dir = plugin_folder("grants-granted", &[test_plugin("granted")]);
    let data = dir.join("data");
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    std::fs::write(data.join("note.txt"), "from the host").expect("write note");
    std::fs::write(
        dir.join("granted.toml"),
        "[env]\nGREETING = \"hello\"\n\n[config]\nregion = \"eu\"\n\n[[dirs]]\nhost = \"data\"\nguest = \"/data\"\n\n[[dirs]]\nhost = \"scratch\"\nguest = \"/scratch\"\nread_only = false\n",
    )
    .expect("write the sidecar");
    let server = start(&dir);
    let port = server.port;

    assert_eq!(granted(port, "env(name=\"GREETING\")"), Ok(json!("hello")));
    // Nothing of the host's environment leaks.
    assert_eq!(granted(port, "env(name=\"PATH\")"), Ok(Value::Null));
    assert_eq!(granted(port, "config(key=\"region\")"), Ok(json!("eu")));
    assert_eq!(granted(port, "config(key=\"zone\")"), Ok(Value::Null));
    assert_eq!(
        granted(port, "read(path=\"/data/note.txt\")"),
        Ok(json!("from the host"))
    );
    assert_eq!(
        granted(port, "write(path=\"/scratch/out.txt\", value=\"written\")"),
        Ok(json!("written"))
    );
    assert_eq!(
        std::fs::read_to_string(scratch.join("out.txt")).expect("the plugin's file"),
        "written"
    );
    let read_only = granted(port, "write(path=\"/data/new.txt\", value=\"x\")");
    assert!(
        read_only
            .as_ref()
            .is_err_and(|e| e.starts_with("capability failed: cannot write /data/new.txt: ")),
        "{read_only:?}"
    );
    assert!(!data.join("new.txt").exists());
    // An import nobody provides: the plugin loaded; only this call fails.
    assert_eq!(
        granted(port, "unprovided()"),
        Err("capability failed: the capability called `test:granted/missing@0.1.0#ping`, which this host does not provide".to_owned())
    );
    let outside = granted(port, "read(path=\"/etc/hostname\")");
    assert!(
        outside
            .as_ref()
            .is_err_and(|e| e.starts_with("capability failed: cannot read /etc/hostname: ")),
        "{outside:?}"
    );
}

/// The audit line of the first native call to `capability` in `log`.
fn audit_line(log: &str, capability: &str) -> Value {
    let needle = format!("\"capability\":\"{capability}\"");
    let line = log
        .lines()
        .find(|l| l.contains(&needle))
        .unwrap_or_else(|| panic!("no audit line for {capability}:\n{log}"));
    let start = line.find('{').expect("a JSON audit line");
    serde_json::from_str(&line[start..]).expect("audit JSON")
}

#[test]
fn per_plugin_fuel_and_memory_caps_narrow_the_global_budgets() {
    let dir = plugin_folder("grants-caps", &[test_plugin("hostile")]);
    std::fs::write(
        dir.join("hostile.toml"),
        "max_fuel_per_call = 1000000\nmax_memory = \"8MiB\"\n",
    )
    .expect("write the sidecar");
    let server = start(&dir);
    for program in ["hostile.spin()", "hostile.hog()"] {
        assert_eq!(
            execute_http(server.port, &format!("def main():\n    return {program}")),
            Err("resource limit exceeded".to_owned()),
            "{program}"
        );
    }
    wait_for_audit(&server, "\"capability\":\"hostile.hog\"", 1);
    let log = server.audit();
    // The endless loop burned exactly its per-call fuel, not the execution's 8 G.
    assert_eq!(audit_line(&log, "hostile.spin")["fuel"], json!(1_000_000));
    let capped = audit_line(&log, "hostile.hog")["fuel"]
        .as_u64()
        .expect("fuel");

    // Without the sidecar the same allocation loop runs until the global 256 MiB.
    let dir = plugin_folder("grants-caps-global", &[test_plugin("hostile")]);
    let uncapped = start(&dir);
    assert_eq!(
        execute_http(uncapped.port, "def main():\n    return hostile.hog()"),
        Err("resource limit exceeded".to_owned())
    );
    wait_for_audit(&uncapped, "\"capability\":\"hostile.hog\"", 1);
    let global = audit_line(&uncapped.audit(), "hostile.hog")["fuel"]
        .as_u64()
        .expect("fuel");
    assert!(
        capped * 8 < global,
        "an 8 MiB cap should stop the loop far earlier: {capped} vs {global}"
    );
}

#[test]
fn a_bad_sidecar_skips_its_plugin_with_the_reason() {
    let dir = fetch_folder(
        "grants-bad-sidecar",
        Some("allowed_outbound_hosts = [\"api.example.com\"]\n"),
    );
    let (lines, _) = startup_log(&["--plugins", dir.to_str().expect("utf-8 path")]);
    let log = lines.join("\n");
    assert!(
        log.contains("plugin skipped plugin=fetch.wasm reason=sidecar `fetch.toml`: allowed_outbound_hosts: `api.example.com` has no scheme: expected `scheme://host:port`, e.g. `https://api.example.com:443`, `http://127.0.0.1:*` or `https://*.example.com`"),
        "{log}"
    );
}

#[test]
fn outbound_http_that_drips_ends_at_the_execution_budget() {
    // No timeout in the sidecar: only the execution's 2 s budget bounds the call.
    // A body dripping for 20 s kept an execution 8 s past a 5 s budget.
    let upstream = Upstream::start();
    let port = upstream.port;
    let dir = fetch_folder(
        "grants-drip",
        Some("allowed_outbound_hosts = [\"http://127.0.0.1:*\"]\n"),
    );
    let server = HttpServer::allowing(&dir, &["--max-execution-time", "2s"]);
    let started = Instant::now();
    let got = execute_http(
        server.port,
        &format!("def main():\n    return web.get(url=\"http://127.0.0.1:{port}/drip\")"),
    );
    let elapsed = started.elapsed();
    assert_eq!(got, Err("resource limit exceeded".to_owned()));
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert_eq!(upstream.requests(), 1);
}

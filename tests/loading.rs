//! Loading a plugins folder: good plugins serve, bad ones are named on stderr and
//! skipped, `--disable` removes capabilities.

use std::path::Path;

use serde_json::json;

use crate::support::{cache_dir, drive, example_plugins, host_bin, startup_log, test_plugin};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("codemode-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A fresh folder `name` holding the example plugins `plugins` (by name).
fn folder_with(name: &str, plugins: &[&str]) -> std::path::PathBuf {
    let dir = temp_dir(name);
    for plugin in plugins {
        let file = format!("{plugin}.wasm");
        copy(&example_plugins().join(&file), &dir.join(&file));
    }
    dir
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
}

#[test]
fn broken_plugins_are_named_and_skipped_while_good_ones_serve() {
    let dir = folder_with("mixed", &["records"]);
    copy(&test_plugin("misfit"), &dir.join("misfit.wasm"));
    copy(&test_plugin("oddtypes"), &dir.join("oddtypes.wasm"));
    std::fs::write(dir.join("notes.wasm"), "not wasm at all").expect("write");
    std::fs::write(dir.join("core.wasm"), b"\0asm\x01\0\0\0").expect("write");
    std::fs::create_dir_all(dir.join("nested")).expect("mkdir");
    copy(
        &example_plugins().join("stats.wasm"),
        &dir.join("nested/stats.wasm"),
    );
    let d = dir.to_str().expect("utf-8");

    let (log, _) = startup_log(&["--plugins", d]);
    let log = log.join("\n");
    for want in [
        "plugin skipped plugin=core.wasm reason=a core WebAssembly module, not a component: build it with a component toolchain (e.g. `cargo build --target wasm32-wasip2`)",
        "plugin skipped plugin=misfit.wasm reason=export `misfit.echo`: name \"json.echo\": the first segment \"json\" is reserved by the language surface",
        "plugin skipped plugin=oddtypes.wasm reason=export `odd.area`: parameter shape: WIT type `variant` is not supported (use an enum, or a record with option fields)",
        "plugin skipped plugin=notes.wasm reason=not a WebAssembly file (no `\\0asm` header); only components are loaded",
        "plugin loaded plugin=records.wasm capabilities=4 cached=",
        "catalog ready plugins=1 capabilities=8",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }
    assert!(
        !log.contains("stats.wasm"),
        "subfolders are not scanned:\n{log}"
    );

    let out = drive(
        &["--plugins", d],
        json!([
            {"op": "call", "tool": "describe_api", "arguments": {"name": "records.lookup"}},
            {"op": "call", "tool": "describe_api", "arguments": {"name": "json.echo"}},
        ]),
    );
    assert_eq!(out["results"][0]["is_error"], json!(false));
    assert_eq!(out["results"][1]["text"][0], "capability not found");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn disabled_capabilities_vanish_and_unknown_ids_stop_startup() {
    let plugins = example_plugins();
    let p = plugins.to_str().expect("utf-8");
    let out = drive(
        &["--plugins", p, "--disable", "records.lookup"],
        json!([
            {"op": "call", "tool": "describe_api", "arguments": {"name": "records.lookup"}},
            {"op": "call", "tool": "search_api", "arguments": {"query": "records.lookup"}},
            {"op": "call", "tool": "describe_api", "arguments": {"name": "records.query"}},
        ]),
    );
    assert_eq!(out["results"][0]["text"][0], "capability not found");
    let names: Vec<&str> = out["results"][1]["structured"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    assert!(!names.contains(&"records.lookup"), "{names:?}");
    assert_eq!(out["results"][2]["is_error"], json!(false));

    let (log, code) = startup_log(&["--plugins", p, "--disable", "records.nope"]);
    assert_eq!(code, Some(1));
    let log = log.join("\n");
    assert!(
        log.contains("unknown disabled capability ID \"records.nope\""),
        "{log}"
    );
}

#[test]
fn a_missing_plugins_folder_stops_startup_with_its_path() {
    let (log, code) = startup_log(&["--plugins", "/nonexistent/codemode-plugins"]);
    assert_eq!(code, Some(1));
    let log = log.join("\n");
    assert!(
        log.contains("plugins folder `/nonexistent/codemode-plugins`: No such file or directory"),
        "{log}"
    );
    assert_eq!(
        log.matches("No such file or directory").count(),
        1,
        "the reason is said once: {log}"
    );
}

#[test]
fn stdin_closing_before_a_client_connects_ends_the_server_cleanly() {
    let plugins = example_plugins();
    let out = std::process::Command::new(host_bin())
        .args(["--plugins", plugins.to_str().expect("utf-8")])
        .args(["--cache-dir", cache_dir()])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run codemode-host");
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(
        log.contains("stdin closed before a client initialized; exiting"),
        "{log}"
    );
    assert!(!log.contains("ERROR"), "{log}");
}

#[test]
fn doc_comments_of_a_plugin_become_its_summary_and_description() {
    // plugins/stats declares its metadata with `#[codemode_sdk::capabilities]`.
    let plugins = example_plugins();
    let out = drive(
        &["--plugins", plugins.to_str().expect("utf-8")],
        json!([
            {"op": "call", "tool": "describe_api", "arguments": {"name": "stats.percentile"}},
            {"op": "call", "tool": "search_api", "arguments": {"query": "quantile"}},
        ]),
    );
    let described = &out["results"][0]["structured"];
    assert_eq!(
        described["summary"],
        "Compute the p-th percentile (0-100) of a list of numbers."
    );
    assert_eq!(
        described["description"],
        "Linear interpolation between the two nearest ranks (numpy's default): p=50 is the \
         median, p=90 the value 90% of the data lies below."
    );
    // "quantile" is only a search term of stats.percentile.
    assert_eq!(
        out["results"][1]["structured"]["results"][0]["name"],
        "stats.percentile"
    );
}

#[test]
fn a_plugin_whose_describe_waits_in_the_host_is_skipped_at_its_deadline() {
    // describe() sleeps an hour on a WASI clock, where fuel cannot stop it; before
    // the loading deadline startup never finished.
    let dir = folder_with("drowsy", &["records"]);
    copy(&test_plugin("drowsy"), &dir.join("drowsy.wasm"));
    let d = dir.to_str().expect("utf-8");
    let (log, _) = startup_log(&["--plugins", d, "--load-timeout", "1s"]);
    let log = log.join("\n");
    for want in [
        "plugin skipped plugin=drowsy.wasm reason=`codemode:plugin/metadata@0.1.0#describe` failed: describe() did not return within 1000 ms (--load-timeout)",
        "catalog ready plugins=1 capabilities=8",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn files_that_would_hang_or_flood_loading_are_skipped_with_the_reason() {
    // A FIFO sidecar or component hung startup forever (opening it waits for a
    // writer); a sparse 3 GiB component was read whole (3.1 GB, 15 s).
    let dir = folder_with("unreadable", &["records", "stats"]);
    mkfifo(&dir.join("stats.toml"));
    mkfifo(&dir.join("pipe.wasm"));
    std::fs::File::create(dir.join("big.wasm"))
        .and_then(|file| file.set_len(3 << 30))
        .expect("a sparse file");
    let d = dir.to_str().expect("utf-8");
    let (log, _) = startup_log(&["--plugins", d]);
    let log = log.join("\n");
    for want in [
        "plugin skipped plugin=big.wasm reason=3221225472 bytes, more than the 268435456 allowed (--max-plugin-bytes)",
        "plugin skipped plugin=pipe.wasm reason=not a regular file (a FIFO); only regular files are read",
        "plugin skipped plugin=stats.wasm reason=sidecar `stats.toml`: not a regular file (a FIFO); only regular files are read",
        "catalog ready plugins=1 capabilities=8",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }

    // The cap is the operator's to set.
    let (log, _) = startup_log(&["--plugins", d, "--max-plugin-bytes", "1KiB"]);
    let log = log.join("\n");
    assert!(
        log.lines().any(
            |line| line.contains("plugin skipped plugin=records.wasm reason=")
                && line.ends_with("bytes, more than the 1024 allowed (--max-plugin-bytes)")
        ),
        "{log}"
    );
    assert!(
        log.contains("catalog ready plugins=0 capabilities=4"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_folder_that_serves_nothing_says_why_and_what_to_do() {
    let build = "in a checkout, `cargo xtask plugins` builds the examples into target/plugins";
    let empty = temp_dir("empty-folder");
    let sources = temp_dir("sources-folder");
    std::fs::write(sources.join("Cargo.toml"), "[package]\n").expect("write");
    std::fs::create_dir_all(sources.join("src")).expect("mkdir");
    let broken = temp_dir("broken-folder");
    std::fs::write(broken.join("notes.wasm"), "not wasm at all").expect("write");
    let cases = [
        (
            &empty,
            format!("the folder is empty: put plugin components (*.wasm) in it; {build}"),
        ),
        (
            &sources,
            format!(
                "the folder holds sources (Cargo.toml) but no built components (*.wasm): build them and put the .wasm files here; {build}"
            ),
        ),
        (
            &broken,
            "every *.wasm file failed to load (each is named above with its reason)".to_owned(),
        ),
    ];
    for (dir, reason) in cases {
        let d = dir.to_str().expect("utf-8");
        let (log, _) = startup_log(&["--plugins", d]);
        let want = format!(
            "WARN codemode_sandbox::plugins::provider: no plugin loaded; serving no plugin capabilities folder={d} reason={reason}"
        );
        assert!(
            log.iter().any(|line| line.ends_with(&want)),
            "missing {want:?} in:\n{}",
            log.join("\n")
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn a_sidecar_no_plugin_reads_or_a_limit_above_the_global_one_is_warned_about() {
    let dir = folder_with("sidecars", &["records", "stats"]);
    std::fs::write(
        dir.join("records.toml"),
        "max_memory = \"1GiB\"\nmax_fuel_per_call = 9000000000\ntimeout = \"1m\"\n",
    )
    .expect("write");
    for orphan in ["orphan.toml", "stats.wasm.toml", "Records.toml"] {
        std::fs::write(dir.join(orphan), "env = { A = \"b\" }\n").expect("write");
    }
    let d = dir.to_str().expect("utf-8");
    let (log, _) = startup_log(&["--plugins", d, "--max-memory", "64MiB"]);
    let log = log.join("\n");
    for want in [
        "WARN codemode_sandbox::plugins::folder: sidecar matches no plugin; its grants are not given sidecar=Records.toml reason=the sidecar of records.wasm is records.toml",
        "WARN codemode_sandbox::plugins::folder: sidecar matches no plugin; its grants are not given sidecar=orphan.toml reason=there is no orphan.wasm; the sidecar of a plugin NAME.wasm is NAME.toml",
        "WARN codemode_sandbox::plugins::folder: sidecar matches no plugin; its grants are not given sidecar=stats.wasm.toml reason=the sidecar of stats.wasm is stats.toml",
        "WARN codemode_sandbox::plugins::folder: sidecar limit capped by the global budget plugin=records.wasm reason=max_memory = 1073741824 bytes is above --max-memory (67108864 bytes)",
        "WARN codemode_sandbox::plugins::folder: sidecar limit capped by the global budget plugin=records.wasm reason=max_fuel_per_call = 9000000000 is above --max-fuel (8000000000)",
        "WARN codemode_sandbox::plugins::folder: sidecar limit capped by the global budget plugin=records.wasm reason=timeout = 1m is above --max-execution-time (5s)",
        "catalog ready plugins=2",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn with_log_format_json_every_log_line_is_an_object_and_audit_lines_have_no_level() {
    use std::io::{BufRead, BufReader, Read, Write};

    let dir = folder_with("json-logs", &["records"]);
    std::fs::write(dir.join("notes.wasm"), "not wasm at all").expect("write");
    let mut child = std::process::Command::new(host_bin())
        .args(["--plugins", dir.to_str().expect("utf-8")])
        .args(["--cache-dir", cache_dir(), "--log-format", "json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn codemode-host");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut answer = || {
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read an answer");
        serde_json::from_str::<serde_json::Value>(&line).expect("a JSON-RPC answer")
    };
    let requests = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute","arguments":{"source":"def main():\n    return records.lookup(key=\"bk-0001\")[\"title\"]"}}}"#,
    ];
    writeln!(stdin, "{}", requests[0]).expect("send initialize");
    assert_eq!(answer()["id"], json!(1));
    writeln!(stdin, "{}\n{}", requests[1], requests[2]).expect("send the call");
    assert_eq!(
        answer()["result"]["structuredContent"],
        json!({"result": "The Burning Tide"})
    );
    drop(stdin);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert_eq!(child.wait().expect("wait").code(), Some(0), "{stderr}");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let (logs, audit): (Vec<_>, Vec<_>) = lines.iter().partition(|l| l.get("level").is_some());
    for line in &logs {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(line.get(key).is_some(), "{key} missing in {line}");
        }
    }
    let without_time = |line: &serde_json::Value| {
        let mut line = line.clone();
        line.as_object_mut().expect("an object").remove("timestamp");
        line
    };
    assert!(
        logs.iter().map(|l| without_time(l)).any(|l| l
            == json!({
                "level": "WARN",
                "message": "plugin skipped",
                "plugin": "notes.wasm",
                "reason": "not a WebAssembly file (no `\\0asm` header); only components are loaded",
                "target": "codemode_sandbox::plugins::folder",
            })),
        "{stderr}"
    );
    // Durations are JSON numbers (milliseconds, to a tenth), not strings.
    let loaded = logs
        .iter()
        .find(|l| l["message"] == json!("plugin loaded"))
        .unwrap_or_else(|| panic!("a plugin loaded line: {stderr}"));
    assert!(loaded["load_ms"].is_f64(), "{loaded}");
    assert_eq!(loaded["capabilities"], json!(4), "{loaded}");
    // The one native call's audit line: JSON too, without a level.
    assert_eq!(audit.len(), 1, "{stderr}");
    assert_eq!(audit[0]["capability"], json!("records.lookup"));
    assert_eq!(audit[0]["decision"], json!("allow"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_readme_names_the_example_plugins_cargo_xtask_run_serves() {
    let readme = include_str!("../README.md");
    let dir = example_plugins();
    let (log, _) = startup_log(&["--plugins", dir.to_str().expect("utf-8")]);
    let log = log.join("\n");
    let count = log
        .split("catalog ready plugins=")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok())
        .expect("the catalog ready line");
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
    ];
    let set_up = readme
        .split("`cargo xtask run` ends with a server answering MCP on stdin/stdout with the ")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("the README says what cargo xtask run serves");
    assert!(
        set_up.starts_with(&format!("{}\nexample plugins:", words[count])),
        "{count} plugins serve: {set_up}"
    );
    // Every plugin's capability root is named there (the examples' files are named
    // ROOT.wasm, or LANGUAGE_ROOT.wasm for the foreign ones).
    for plugin in std::fs::read_dir(&dir).expect("list the examples") {
        let path = plugin.expect("entry").path();
        if path.extension().is_none_or(|e| e != "wasm") {
            continue;
        }
        let file = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let root = log
            .lines()
            .find(|l| l.contains(&format!("plugin loaded plugin={file} ")))
            .map(|_| {
                file.trim_end_matches(".wasm")
                    .rsplit('_')
                    .next()
                    .unwrap_or(&file)
                    .to_owned()
            })
            .expect("the plugin loaded");
        assert!(
            set_up.contains(&format!("`{root}`")),
            "{root} missing: {set_up}"
        );
    }
    // The client config runs a release build over a precompiled cache.
    assert!(
        readme.contains("\"command\": \"/path/to/codemode-host/target/release/codemode-host\"")
    );
    assert!(readme.contains("target/release/codemode-host precompile --plugins target/plugins"));
}

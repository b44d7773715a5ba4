//! Hot reload end to end: a running HTTP server picks up plugins added, replaced and
//! removed in its folder; executions in flight finish on the catalog they started
//! with; a half-written file never replaces the last good version.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::support::{
    HttpServer, call_tool, example_plugins, execute_http, host_bin, plugin_folder, private_cache,
    raw_request, test_plugin, wait_for_audit, wait_for_log, wait_until, with_cache,
};

/// Returns the serving version after a little work (so that executions overlap the
/// swap).
const VERSION: &str = "def main():\n    t = 0\n    for i in range(20000):\n        t += i\n    return versioned.version()[\"version\"]";

/// Replaces `dest` with `source` the way a careful operator does: copy beside it, then
/// rename over it.
fn replace_atomically(source: &Path, dest: &Path) {
    let temp = dest.with_extension("wasm.part");
    std::fs::copy(source, &temp).expect("copy the new version");
    std::fs::rename(&temp, dest).expect("rename it in place");
}

/// A server watching `dir`, with a cache of its own: replacing and removing plugins
/// removes their cache entries, which the tests sharing the common cache count on.
fn server(dir: &Path, extra: &[&str]) -> HttpServer {
    server_with_cache(dir, extra).0
}

fn server_with_cache(dir: &Path, extra: &[&str]) -> (HttpServer, std::path::PathBuf) {
    let label = dir
        .file_name()
        .expect("a folder name")
        .to_string_lossy()
        .into_owned();
    let cache = private_cache(&label);
    let mut args = vec![
        "--plugins",
        dir.to_str().expect("utf-8 path"),
        "--allow-all",
        "--cache-dir",
        cache.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    (HttpServer::start(&args), cache)
}

#[test]
fn replacing_a_plugin_under_load_fails_no_execute_and_the_new_version_answers() {
    let dir = plugin_folder("reload-under-load", &[test_plugin("versioned")]);
    let plugin = dir.join("versioned.wasm");
    let server = server(
        &dir,
        &[
            "--max-concurrent-executions",
            "16",
            "--max-execution-steps",
            "100000000",
            "--max-fuel",
            "100000000000",
            "--max-execution-time",
            "30s",
        ],
    );
    assert_eq!(execute_http(server.port, VERSION), Ok(json!(1)));

    // A long execution (about 2 s) that calls the plugin before the swap and again
    // after it.
    let long = {
        let port = server.port;
        std::thread::spawn(move || {
            execute_http(
                port,
                "def main():\n    before = versioned.version()[\"version\"]\n    t = 0\n    for i in range(30000000):\n        t += 1\n    return [before, versioned.version()[\"version\"]]",
            )
        })
    };
    // Its first call is the second one audited (after the check above).
    wait_for_audit(&server, "\"capability\":\"versioned.version\"", 2);
    // Four clients executing in a loop across the swap: each has been answered
    // before it, and each sees the new version before they stop.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let updated = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let port = server.port;
            let (stop, answered, updated) = (stop.clone(), answered.clone(), updated.clone());
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let got = execute_http(port, VERSION);
                    if seen.is_empty() {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    if got == Ok(json!(2)) && !seen.contains(&got) {
                        updated.fetch_add(1, Ordering::Relaxed);
                    }
                    seen.push(got);
                }
                seen
            })
        })
        .collect();
    wait_until(
        "an answer for every client",
        || answered.load(Ordering::Relaxed) == 4,
        || server.log(),
    );
    replace_atomically(&test_plugin("versioned_two"), &plugin);
    wait_for_log(&server, "catalog reloaded", 1);
    wait_until(
        "every client to see the new version",
        || updated.load(Ordering::Relaxed) == 4,
        || server.log(),
    );
    stop.store(true, Ordering::Relaxed);

    for client in clients {
        let seen = client.join().expect("client thread");
        assert!(!seen.is_empty());
        let versions: Vec<u64> = seen
            .iter()
            .map(|r| match r {
                Ok(v) => v.as_u64().expect("a version"),
                Err(e) => panic!("an execute failed during the reload: {e}"),
            })
            .collect();
        // Once a client saw the new version it never sees the old one again.
        let first_two = versions
            .iter()
            .position(|v| *v == 2)
            .unwrap_or(versions.len());
        assert!(
            versions[..first_two].iter().all(|v| *v == 1)
                && versions[first_two..].iter().all(|v| *v == 2),
            "{versions:?}"
        );
        assert_eq!(versions.last(), Some(&2), "{versions:?}");
    }
    assert_eq!(
        long.join().expect("long execution"),
        Ok(json!([1, 1])),
        "an execution keeps the catalog it started with"
    );
    assert_eq!(execute_http(server.port, VERSION), Ok(json!(2)));
    let log = server.log();
    assert!(
        log.contains("plugin=versioned.wasm capabilities=1 cached="),
        "{log}"
    );
}

#[test]
fn a_half_written_plugin_keeps_the_last_good_version_until_the_copy_completes() {
    let dir = plugin_folder("reload-half-written", &[test_plugin("versioned")]);
    let server = server(&dir, &[]);
    assert_eq!(execute_http(server.port, VERSION), Ok(json!(1)));

    // An operator's slow `cp` over the file: half of it, a pause, the rest.
    let bytes = std::fs::read(test_plugin("versioned_two")).expect("read v2");
    let (head, tail) = bytes.split_at(bytes.len() / 2);
    let mut file = std::fs::File::create(dir.join("versioned.wasm")).expect("open");
    file.write_all(head).expect("write half");
    file.flush().expect("flush");
    wait_for_log(
        &server,
        "plugin reload failed; its last good version keeps serving",
        1,
    );
    assert_eq!(execute_http(server.port, VERSION), Ok(json!(1)));
    // Ready, naming the file whose new version failed, with the logged reason.
    let failure =
        "plugin reload failed; its last good version keeps serving plugin=versioned.wasm reason=";
    let log = server.log();
    let reason = log
        .lines()
        .rev()
        .find_map(|line| Some(&line[line.find(failure)? + failure.len()..]))
        .expect("the failure's log line");
    assert!(reason.starts_with("invalid component:"), "{log}");
    assert_eq!(
        readyz(server.port),
        (
            200,
            format!(
                "ready\nplugins left out:\n  versioned.wasm: {reason} (an earlier version serves)\n"
            )
        )
    );
    let failures = log.matches(failure).count() as u64;
    assert_eq!(
        metric(
            server.port,
            "codemode_plugin_load_failures_total{plugin=\"versioned.wasm\"}"
        ),
        Some(failures)
    );
    assert!(metric(server.port, "codemode_reloads_total{outcome=\"failed\"}") >= Some(1));

    file.write_all(tail).expect("write the rest");
    drop(file);
    wait_for_log(&server, "catalog reloaded", 1);
    assert_eq!(execute_http(server.port, VERSION), Ok(json!(2)));
    assert_eq!(readyz(server.port), (200, "ready\n".to_owned()));
    assert!(metric(server.port, "codemode_reloads_total{outcome=\"ok\"}") >= Some(1));
}

/// `/readyz`'s status and body.
fn readyz(port: u16) -> (u16, String) {
    let ready = raw_request(port, "GET", "/readyz", &[], "");
    (ready.status, ready.body)
}

/// The value of the `/metrics` line for `series` (name and labels), if there is one.
fn metric(port: u16, series: &str) -> Option<u64> {
    let metrics = raw_request(port, "GET", "/metrics", &[], "");
    metrics
        .body
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `search_api` names, in rank order.
fn search(port: u16, query: &str) -> Vec<String> {
    let result = call_tool(port, "search_api", json!({ "query": query }));
    result["structuredContent"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["name"].as_str().expect("name").to_owned())
        .collect()
}

fn describe_error(port: u16, name: &str) -> Value {
    let result = call_tool(port, "describe_api", json!({ "name": name }));
    result["isError"].clone()
}

#[test]
fn adding_and_removing_plugins_changes_search_describe_and_execute() {
    let examples = example_plugins();
    let dir = plugin_folder("reload-add-remove", &[examples.join("records.wasm")]);
    let server = server(&dir, &[]);
    assert!(search(server.port, "percentile").is_empty());

    replace_atomically(&examples.join("stats.wasm"), &dir.join("stats.wasm"));
    wait_for_log(&server, "catalog reloaded", 1);
    assert_eq!(search(server.port, "percentile"), vec!["stats.percentile"]);
    assert_eq!(describe_error(server.port, "stats.summary"), json!(false));
    assert_eq!(
        execute_http(
            server.port,
            "def main():\n    return stats.summary(values=[1, 2, 3])[\"median\"]"
        ),
        Ok(json!(2.0))
    );

    std::fs::remove_file(dir.join("stats.wasm")).expect("remove stats");
    wait_for_log(&server, "catalog reloaded", 2);
    assert!(search(server.port, "percentile").is_empty());
    assert_eq!(describe_error(server.port, "stats.summary"), json!(true));
    assert_eq!(
        execute_http(
            server.port,
            "def main():\n    return stats.summary(values=[1, 2, 3])"
        ),
        Err(
            "invalid program: <codemode>:2:12: Variable `stats` not found; did you mean state?"
                .to_owned()
        )
    );
    let log = server.log();
    assert!(log.contains("plugin removed plugin=stats.wasm"), "{log}");
    // Unchanged files are not loaded again.
    assert_eq!(
        log.matches("plugin loaded plugin=records.wasm").count(),
        1,
        "{log}"
    );
    assert!(
        log.contains("catalog reloaded plugins=1 capabilities=8 failed=0 reload_ms="),
        "{log}"
    );
}

#[test]
fn the_cache_entry_of_a_replaced_or_removed_version_is_removed() {
    let dir = plugin_folder("reload-cache-entries", &[test_plugin("versioned")]);
    let plugin = dir.join("versioned.wasm");
    let (server, cache) = server_with_cache(&dir, &[]);
    let entries = || {
        let mut names: Vec<String> = std::fs::read_dir(&cache)
            .expect("list the cache")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("plugin-"))
            .collect();
        names.sort();
        names
    };
    let first = entries();
    assert_eq!(first.len(), 2, "an artifact and its tag: {first:?}");

    replace_atomically(&test_plugin("versioned_two"), &plugin);
    wait_for_log(&server, "catalog reloaded", 1);
    assert_eq!(execute_http(server.port, VERSION), Ok(json!(2)));
    let second = entries();
    assert_eq!(second.len(), 2, "{second:?}");
    assert!(
        first.iter().all(|old| !second.contains(old)),
        "the replaced version's entry stays: {first:?} then {second:?}"
    );

    std::fs::remove_file(&plugin).expect("remove the plugin");
    wait_for_log(&server, "catalog reloaded", 2);
    assert_eq!(entries(), Vec::<String>::new());

    // A version that compiles but never loads (its export is outside the type
    // mapping) would never be used again: its entry goes at once.
    replace_atomically(&test_plugin("oddtypes"), &dir.join("oddtypes.wasm"));
    wait_for_log(&server, "plugin skipped plugin=oddtypes.wasm", 1);
    assert_eq!(entries(), Vec::<String>::new());
}

/// The inodes that the inotify instances of process `pid` watch.
fn watched_inodes(pid: u32) -> Vec<u64> {
    let mut inodes = Vec::new();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("list the server's files");
    for fd in fds.map_while(Result::ok) {
        let target = std::fs::read_link(fd.path()).unwrap_or_default();
        if target.as_os_str() != "anon_inode:inotify" {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        // `inotify wd:1 ino:1a2b sdev:... mask:...`: the inode in hexadecimal.
        inodes.extend(info.lines().filter_map(|line| {
            let hex = line
                .strip_prefix("inotify ")?
                .split_whitespace()
                .find_map(|f| f.strip_prefix("ino:"))?;
            u64::from_str_radix(hex, 16).ok()
        }));
    }
    inodes
}

#[test]
fn no_watch_serves_the_folder_as_it_was_at_start() {
    use std::os::unix::fs::MetadataExt;
    let examples = example_plugins();
    // A watching server holds an inotify watch on the folder (the control)...
    let watched = plugin_folder("reload-watched", &[examples.join("records.wasm")]);
    let watching = server(&watched, &[]);
    wait_for_log(&watching, "watching the plugins folder for changes", 1);
    let inode = std::fs::metadata(&watched).expect("the folder").ino();
    assert!(watched_inodes(watching.pid()).contains(&inode));
    // ...one with --no-watch holds none, so nothing can ever reload its folder:
    // decided from the server's own files, not from a time without a reload.
    let dir = plugin_folder("reload-no-watch", &[examples.join("records.wasm")]);
    let server = server(&dir, &["--no-watch"]);
    let inode = std::fs::metadata(&dir).expect("the folder").ino();
    assert!(!watched_inodes(server.pid()).contains(&inode));
    replace_atomically(&examples.join("stats.wasm"), &dir.join("stats.wasm"));
    assert!(search(server.port, "percentile").is_empty());
    let log = server.log();
    assert!(!log.contains("watching the plugins folder"), "{log}");
    assert!(!log.contains("catalog reloaded"), "{log}");
}

/// The name of every serving capability under `root`, from a search.
fn serving_under(port: u16, root: &str) -> Vec<String> {
    let mut names: Vec<String> = search(port, root)
        .into_iter()
        .filter(|name| name.starts_with(&format!("{root}.")))
        .collect();
    names.sort();
    names
}

#[test]
fn a_newcomer_claiming_served_names_is_refused_and_the_serving_plugin_keeps_them() {
    let records = example_plugins().join("records.wasm");
    let dir = plugin_folder("reload-impostor", std::slice::from_ref(&records));
    let server = server(&dir, &[]);
    let lookup = "def main():\n    return records.lookup(key=\"bk-0001\")";
    let before = execute_http(server.port, lookup);
    assert!(before.is_ok(), "{before:?}");

    // A file sorting first, claiming the same names and IDs.
    replace_atomically(&records, &dir.join("arecords.wasm"));
    wait_for_log(&server, "catalog reloaded", 1);
    assert_eq!(execute_http(server.port, lookup), before);
    wait_for_log(
        &server,
        "WARN codemode_server::registry::claims: source refused source=arecords.wasm serving=records.wasm reason=capability ID `records.find` is already served by records.wasm",
        1,
    );
    wait_for_log(&server, "catalog reloaded plugins=1 capabilities=", 1);
    assert!(server.log().contains(" failed=1 "), "{}", server.log());
}

#[test]
fn at_start_no_plugin_gets_a_contested_name() {
    let records = example_plugins().join("records.wasm");
    let dir = plugin_folder("start-impostor", std::slice::from_ref(&records));
    std::fs::copy(&records, dir.join("arecords.wasm")).expect("copy the impostor");
    let server = server(&dir, &[]);
    assert_eq!(serving_under(server.port, "records"), Vec::<String>::new());
    let log = server.log();
    let reason = "capability ID `records.find` is claimed by arecords.wasm and records.wasm";
    for file in ["arecords.wasm", "records.wasm"] {
        assert!(
            log.contains(&format!(
                "ERROR codemode_server::registry::claims: source refused: no source gets a contested name source={file} reason={reason}"
            )),
            "{log}"
        );
        assert_eq!(
            metric(
                server.port,
                &format!("codemode_plugin_load_failures_total{{plugin=\"{file}\"}}")
            ),
            Some(1)
        );
    }
    assert_eq!(
        readyz(server.port),
        (
            200,
            format!(
                "ready\nplugins left out:\n  arecords.wasm: {reason}\n  records.wasm: {reason}\n"
            )
        )
    );

    // Every plugin required: the same folder stops startup, naming both.
    let out = std::process::Command::new(host_bin())
        .args(with_cache(&[
            "--plugins",
            dir.to_str().expect("utf-8 path"),
            "--allow-all",
            "--require-all-plugins",
        ]))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run codemode-host");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.split_once(" ERROR codemode_host: ").map(|(_, m)| m))
        .collect();
    assert_eq!(
        errors[errors.len().saturating_sub(3)..],
        [
            "every plugin must load, and 2 plugins did not:".to_owned(),
            format!("  arecords.wasm: {reason}"),
            format!("  records.wasm: {reason}"),
        ],
        "{stderr}"
    );
}

#[test]
fn with_every_plugin_required_a_file_that_fails_to_load_turns_readyz_503() {
    let dir = plugin_folder(
        "reload-require-all",
        &[example_plugins().join("records.wasm")],
    );
    let server = server(&dir, &["--require-all-plugins"]);
    assert_eq!(readyz(server.port), (200, "ready\n".to_owned()));

    std::fs::write(dir.join("notes.wasm"), "not a component\n").expect("write notes.wasm");
    let not_ready = format!(
        "not ready: every plugin must load (--require-all-plugins)\nplugins left out:\n  notes.wasm: {}\n",
        "not a WebAssembly file (no `\\0asm` header); only components are loaded"
    );
    wait_until(
        "readyz to turn 503",
        || readyz(server.port) == (503, not_ready.clone()),
        || format!("{:?}\n{}", readyz(server.port), server.log()),
    );
    // The catalog it had keeps serving.
    assert_eq!(
        execute_http(
            server.port,
            "def main():\n    return records.lookup(key=\"bk-0001\")[\"title\"]"
        ),
        Ok(json!("The Burning Tide"))
    );

    std::fs::remove_file(dir.join("notes.wasm")).expect("remove notes.wasm");
    wait_until(
        "readyz to turn 200",
        || readyz(server.port) == (200, "ready\n".to_owned()),
        || format!("{:?}\n{}", readyz(server.port), server.log()),
    );
}

//! The stdio round trip as a client sees it: a raw JSON-RPC client writing one
//! line per request to the server binary over a pipe and reading one line back,
//! beside the floor of the same client and pipe (`cat` echoing the line) measured
//! in the same run. Each row is a request's p50 above that floor, the part the
//! server adds (issue 19, item 1).
//!
//! The floor is `cat` alone, measured first, with the client and `cat` pinned to
//! two different CPUs, as the issue measured it (86 µs then). Unpinned, the two
//! often ping-pong on one CPU: a blocking pipe read is woken as a synchronous
//! wake, and the kernel moves such a reader to its writer's CPU. A server that
//! waits in `epoll` (tokio, and every server with more than one pipe to watch)
//! is woken without that hint and answers from the other CPU, so an unpinned
//! floor flipped between a few µs and some 45 µs from run to run, and every row
//! with it. The floor is measured a second time, unpinned, between the server's
//! requests and printed beside it. The server's own work per request is a few
//! µs (`perf`); the rest of the p50 is the wakes across CPUs.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::host_binary;
use crate::{Row, bench_config, execute, percentiles, runtime, us};

/// Requests of each kind measured (after as many to warm up).
const ROUNDS: usize = 400;

/// The program of the execute row.
const TRIVIAL: &str = "def main():\n    return 1\n";

/// One kind of request: what the row says, the request's method and params, and
/// its target above the floor in µs (`None`: the trivial execute's own target,
/// which adds the in-process trivial execute of the same run).
struct Kind {
    what: &'static str,
    target: &'static str,
    above_floor: Option<f64>,
    method: &'static str,
    params: serde_json::Value,
    /// Whether the answer is a tool error (`isError`), as for a missing name.
    fails: bool,
    /// Whether it goes to the server deciding visibility per subject
    /// ([`VISIBILITY_POLICY`]) instead of the one without a policy.
    per_subject: bool,
}

/// The policy of the server with per-subject catalogs: the subject sees every
/// capability but `stats.*`, so each search and describe reads a view.
const VISIBILITY_POLICY: &str = "package codemode.authz\n\ndefault allow := true\n\ndefault visible := false\n\nvisible if not startswith(input.capability.name, \"stats.\")\n";

/// Where the two `describe_api` kinds sit in [`kinds`].
const DESCRIBE_MISSING: usize = 2;
const DESCRIBE_FOUND: usize = 3;

fn kinds() -> Vec<Kind> {
    use serde_json::json;
    let tool =
        |name: &str, arguments: serde_json::Value| json!({"name": name, "arguments": arguments});
    vec![
        Kind {
            what: "stdio ping, above the pipe floor",
            target: "(none)",
            above_floor: None,
            method: "ping",
            params: json!({}),
            fails: false,
            per_subject: false,
        },
        Kind {
            what: "stdio search_api, no match, above the floor",
            target: "≤ 40 µs",
            above_floor: Some(40.0),
            method: "tools/call",
            params: tool("search_api", json!({"query": "zzqx wvyk"})),
            fails: false,
            per_subject: false,
        },
        Kind {
            what: "stdio describe_api, missing name, above the floor",
            target: "≤ 40 µs",
            above_floor: Some(40.0),
            method: "tools/call",
            params: tool("describe_api", json!({"name": "nosuch.thing"})),
            fails: true,
            per_subject: false,
        },
        Kind {
            what: "stdio describe_api stats.summary, above the floor",
            target: "≤ 40 µs",
            above_floor: Some(40.0),
            method: "tools/call",
            params: tool("describe_api", json!({"name": "stats.summary"})),
            fails: false,
            per_subject: false,
        },
        Kind {
            what: "stdio tools/list, above the floor",
            target: "≤ 60 µs",
            above_floor: Some(60.0),
            method: "tools/list",
            params: json!({}),
            fails: false,
            per_subject: false,
        },
        Kind {
            what: "stdio execute `return 1`, above floor + in-process",
            target: "≤ 40 µs",
            above_floor: Some(40.0),
            method: "tools/call",
            params: tool("execute", json!({"source": TRIVIAL})),
            fails: false,
            per_subject: false,
        },
        Kind {
            what: "stdio search_api, no match, per-subject catalog, above the floor",
            target: "≤ 40 µs",
            above_floor: Some(40.0),
            method: "tools/call",
            params: tool("search_api", json!({"query": "zzqx wvyk"})),
            fails: false,
            per_subject: true,
        },
        Kind {
            what: "stdio describe_api of a hidden name, per-subject catalog, above the floor",
            target: "≤ 40 µs",
            above_floor: Some(40.0),
            method: "tools/call",
            params: tool("describe_api", json!({"name": "stats.summary"})),
            fails: true,
            per_subject: true,
        },
    ]
}

/// A child process spoken to one line at a time.
struct Pipe {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Pipe {
    fn spawn(command: &mut Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {command:?}: {error}"));
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            panic!("{command:?} has no pipes");
        };
        Pipe {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            line: String::new(),
        }
    }

    /// Writes `request` (one line) and returns the time until a line came back.
    fn round_trip(&mut self, request: &str) -> Duration {
        self.line.clear();
        let started = Instant::now();
        if let Err(error) = self.stdin.write_all(request.as_bytes()) {
            panic!("cannot write a request: {error}");
        }
        match self.stdout.read_line(&mut self.line) {
            Ok(0) => panic!("the child closed its output"),
            Ok(_) => started.elapsed(),
            Err(error) => panic!("cannot read an answer: {error}"),
        }
    }

    /// Sends `request` and checks the answer is a result for `id`, a tool error
    /// exactly when `fails`.
    fn call(&mut self, id: u64, request: &str, fails: bool) -> Duration {
        let took = self.round_trip(request);
        let answer: serde_json::Value = serde_json::from_str(&self.line)
            .unwrap_or_else(|error| panic!("answer is not JSON ({error}): {}", self.line));
        assert_eq!(answer["id"], id, "answer to another request: {}", self.line);
        assert!(
            answer.get("result").is_some(),
            "not a result: {}",
            self.line
        );
        assert_eq!(
            answer["result"]["isError"] == true,
            fails,
            "unexpected answer: {}",
            self.line
        );
        took
    }

    fn finish(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn request(id: u64, method: &str, params: &serde_json::Value) -> String {
    let mut line =
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            .to_string();
    line.push('\n');
    line
}

/// p50 of `cat` echoing each request, alone (before the server starts), with this
/// thread and `cat` on two different CPUs when there are two.
fn floor_alone(kinds: &[Kind]) -> Duration {
    let pinned = Pinned::apart();
    let mut command = match &pinned {
        Some(pinned) => {
            let mut taskset = Command::new("taskset");
            taskset.args(["-c", &pinned.other.to_string(), "cat"]);
            taskset
        }
        None => Command::new("cat"),
    };
    let mut cat = Pipe::spawn(&mut command);
    let mut times = Vec::with_capacity(ROUNDS * kinds.len());
    for round in 0..2 * ROUNDS {
        for (id, kind) in kinds.iter().enumerate() {
            let took = cat.round_trip(&request(id as u64, kind.method, &kind.params));
            if round >= ROUNDS {
                times.push(took);
            }
        }
    }
    cat.finish();
    drop(pinned);
    percentiles(&mut times).0
}

/// This thread pinned to one CPU, `other` a second CPU it may use; the thread's
/// CPUs are restored on drop.
struct Pinned {
    before: libc::cpu_set_t,
    other: usize,
}

impl Pinned {
    /// Pins this thread to the first CPU it may use, when it may use two.
    #[allow(unsafe_code)]
    fn apart() -> Option<Pinned> {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: the sets are plain bit arrays (zeroed is an empty set), and
        // `sched_getaffinity`/`sched_setaffinity` read or write exactly `size`
        // bytes of them.
        unsafe {
            let mut before: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut before) != 0 {
                return None;
            }
            let mut usable =
                (0..libc::CPU_SETSIZE as usize).filter(|&cpu| libc::CPU_ISSET(cpu, &before));
            let (Some(mine), Some(other)) = (usable.next(), usable.next()) else {
                return None;
            };
            let mut only: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(mine, &mut only);
            if libc::sched_setaffinity(0, size, &only) != 0 {
                return None;
            }
            Some(Pinned { before, other })
        }
    }
}

impl Drop for Pinned {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: as in `apart`; `before` is the set `sched_getaffinity` gave.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.before);
        }
    }
}

/// The server binary over stdio, initialized, with `more` flags.
fn start_host(root: &Path, plugins: &Path, more: &[&std::ffi::OsStr]) -> Pipe {
    let mut command = Command::new(host_binary());
    command
        .arg("--plugins")
        .arg(plugins)
        .arg("--cache-dir")
        .arg(root.join("target/test-cache"))
        .args(["--no-watch", "--log", "warn"])
        .args(more);
    let mut host = Pipe::spawn(&mut command);
    let initialize = serde_json::json!({
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "codemode-bench", "version": "0"},
    });
    host.call(0, &request(0, "initialize", &initialize), false);
    if let Err(error) = host
        .stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
    {
        panic!("cannot write: {error}");
    }
    host
}

/// p50s of three things measured in turn, request by request: the pipe's own
/// round trip (`cat` echoing each request), each kind against the server binary
/// (in `kinds`' order), and a trivial execute in this process (the execute row's
/// allowance).
struct Measured {
    floor: Duration,
    kinds: Vec<Duration>,
    in_process: Duration,
}

fn floor_and_server(root: &Path, plugins: &Path, kinds: &[Kind]) -> Measured {
    let service = match codemode_server::Service::load(&bench_config(root, plugins)) {
        Ok(service) => service,
        Err(error) => panic!("cannot load the service: {error}"),
    };
    let runtime = runtime();
    let mut in_process = Vec::with_capacity(ROUNDS);
    let mut host = start_host(root, plugins, &[]);
    let policy = root.join("target/bench-visibility.rego");
    if let Err(error) = std::fs::write(&policy, VISIBILITY_POLICY) {
        panic!("cannot write {}: {error}", policy.display());
    }
    let mut per_subject = start_host(
        root,
        plugins,
        &[
            "--policy".as_ref(),
            policy.as_os_str(),
            "--visibility-decision".as_ref(),
            "data.codemode.authz.visible".as_ref(),
        ],
    );
    let mut cat = Pipe::spawn(&mut Command::new("cat"));
    let mut floor = Vec::with_capacity(ROUNDS * kinds.len());
    let mut times = vec![Vec::with_capacity(ROUNDS); kinds.len()];
    let mut id = 0;
    for round in 0..2 * ROUNDS {
        for (kind, times) in kinds.iter().zip(&mut times) {
            id += 1;
            let line = request(id, kind.method, &kind.params);
            let echoed = cat.round_trip(&line);
            let server = if kind.per_subject {
                &mut per_subject
            } else {
                &mut host
            };
            let answered = server.call(id, &line, kind.fails);
            if round >= ROUNDS {
                floor.push(echoed);
                times.push(answered);
            }
        }
        let (executed, _) = execute(&runtime, &service, TRIVIAL);
        if round >= ROUNDS {
            in_process.push(executed);
        }
    }
    cat.finish();
    host.finish();
    per_subject.finish();
    Measured {
        floor: percentiles(&mut floor).0,
        kinds: times.iter_mut().map(|times| percentiles(times).0).collect(),
        in_process: percentiles(&mut in_process).0,
    }
}

/// The measurement and its rows.
pub(crate) fn measure(root: &Path, plugins: &Path, rows: &mut Vec<Row>) {
    let kinds = kinds();
    let alone = floor_alone(&kinds);
    let Measured {
        floor,
        kinds: measured,
        in_process: trivial,
    } = floor_and_server(root, plugins, &kinds);
    println!(
        "stdio, raw pipe client, p50 of {ROUNDS}: the pipe floor (cat) {:.0} µs alone (client and cat on two CPUs), {:.0} µs between the server's requests (unpinned); in-process trivial execute {:.0} µs",
        us(alone),
        us(floor),
        us(trivial)
    );
    for (kind, p50) in kinds.iter().zip(&measured) {
        let mut above = us(*p50) - us(alone);
        if kind.method == "tools/call" && kind.params["name"] == "execute" {
            above -= us(trivial);
        }
        println!("{}: p50 {:.0} µs, {above:.0} µs", kind.what, us(*p50));
        rows.push(Row {
            what: kind.what,
            measured: format!("{above:.0} µs (p50 {:.0} µs)", us(*p50)),
            target: kind.target,
            ratio: kind.above_floor.map(|limit| above.max(0.0) / limit),
        });
    }
    // A found name may cost more than a missing one (its description is rendered),
    // but by at most 20%.
    if let (Some(missing), Some(found)) =
        (measured.get(DESCRIBE_MISSING), measured.get(DESCRIBE_FOUND))
    {
        let slower = found.as_secs_f64() / missing.as_secs_f64();
        rows.push(Row {
            what: "stdio describe_api: found / missing name",
            measured: format!("{slower:.2}x"),
            target: "≤ 1.2x",
            ratio: Some(slower / 1.2),
        });
    }
}

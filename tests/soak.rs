//! The soak: the real server over Streamable HTTP under everything at once, for
//! [`DEFAULT_SECONDS`] in the test command and a minute from `cargo xtask soak`.
//!
//! Eight clients mix ordinary programs (each answer checked exactly) with hostile
//! ones — a plugin sleeping in a host call past the budget, a spinning and a hoarding
//! plugin, interpreter loops and allocations, a huge unknown name, a policy builtin
//! sized by an argument, a client that goes away mid-call — while one thread holds
//! connections that never finish their headers or bodies, another replaces a plugin
//! every [`REPLACE_EVERY`], and a plugin whose `describe()` never returns sits in the
//! folder so that every reload meets it. Beside them run hostile upstream MCP
//! servers (`tests/upstreams/hostile.py`): a schema bomb and a schema too deep, a
//! flood of list_changed, a result over 16 MiB, a crash loop, a slow tool list.
//! What must hold: no ordinary program fails,
//! every hostile one is answered with its exact text within the budget plus
//! [`SLACK`], resident memory, threads and open files stay flat (read on the idle
//! server after a warm-up and after the soak; the trend per sixth of the run is
//! printed), nothing panics, and SIGTERM ends the server cleanly afterwards.
//!
//! Environment: `CODEMODE_SOAK_SECONDS` (default [`DEFAULT_SECONDS`]) and
//! `CODEMODE_SOAK_HOST` (the server binary; default: the one built with this test).

// A failed expectation is a test failure; panicking with the message is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The bench's server handle and keep-alive client, so that both drive the server
// the same way; the bench's load loop in it is not used here.
#[allow(dead_code)]
#[path = "../bench/src/server.rs"]
mod server;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use server::{Client, Server};

/// How long the soak runs unless `CODEMODE_SOAK_SECONDS` says otherwise.
const DEFAULT_SECONDS: u64 = 10;
/// The execution budget the server runs with (`--max-execution-time`).
const BUDGET: Duration = Duration::from_secs(2);
/// How late past [`BUDGET`] a hostile program may be answered.
const SLACK: Duration = Duration::from_secs(1);
/// Concurrent MCP clients.
const CLIENTS: usize = 8;
/// Slots: every client plus the executions of clients that went away, so that an
/// ordinary program never waits in line behind a hostile one.
const SLOTS: usize = 16;
/// How often the replaced plugin changes.
const REPLACE_EVERY: Duration = Duration::from_secs(2);
/// Connections held open unfinished (half without the end of their headers, half
/// with a body shorter than announced).
const SLOW_CONNECTIONS: usize = 16;
/// How often memory, threads and open files are read.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// How much more resident memory the idle server may hold after the soak than
/// after the warm-up: the allocator and the instance pool settle, they do not grow
/// with time.
const RSS_GROWTH: f64 = 0.10;
/// Open files the idle server may hold after the soak beyond those after the
/// warm-up.
const FD_GROWTH: u64 = 2;
/// Threads the idle server may hold after the soak beyond those after the warm-up.
const THREAD_GROWTH: u64 = 2;
/// How long the server may take to close the connections the soak dropped.
const SETTLE: Duration = Duration::from_secs(5);

/// What a program's answer must be.
enum Expect {
    /// This result, exactly.
    Value(Value),
    /// One of these results (the replaced plugin answers with either version).
    OneOf(&'static [i64]),
    /// This error text, exactly, within the budget plus [`SLACK`].
    Error(String),
    /// One of these error texts, within the budget plus [`SLACK`] (a crashing
    /// upstream's call fails as unavailable; while it restarts, its names are not
    /// in the catalog; a call queued at a slow upstream may reach the budget).
    Errors(Vec<String>),
    /// No answer: the client sends the program and hangs up after
    /// [`VANISH_AFTER`]; the server must free the slot.
    Vanish,
}

/// How long a vanishing client waits before it hangs up.
const VANISH_AFTER: Duration = Duration::from_millis(100);

/// One program of the mix.
struct Case {
    name: &'static str,
    source: &'static str,
    expect: Expect,
    /// How many times it appears in each client's round.
    weight: usize,
}

/// The mix, built once.
fn cases() -> &'static [Case] {
    static CASES: std::sync::LazyLock<Vec<Case>> = std::sync::LazyLock::new(mix);
    &CASES
}

fn mix() -> Vec<Case> {
    let ordinary = |name, source, expect| Case {
        name,
        source,
        expect,
        weight: 4,
    };
    let hostile = |name, source, text: &str| Case {
        name,
        source,
        expect: Expect::Error(text.to_owned()),
        weight: 1,
    };
    vec![
        ordinary(
            "trivial",
            "def main():\n    return 1",
            Expect::Value(json!(1)),
        ),
        ordinary(
            "lookup",
            "def main():\n    return records.lookup(key=\"bk-0001\")[\"title\"]",
            Expect::Value(json!("The Burning Tide")),
        ),
        ordinary(
            "query and summary",
            "def main():\n    r = records.query(filter={\"genre\": \"fantasy\"}, tags=[\"classic\"])\n    return stats.summary(values=[x[\"score\"] for x in r[\"items\"]])[\"count\"]",
            Expect::Value(json!(8)),
        ),
        ordinary(
            "word counts",
            "def main():\n    return text.word_counts(text=\"a b a c a b\", top=2)",
            Expect::Value(json!({"counts": {"a": 3, "b": 2}, "total": 6})),
        ),
        ordinary(
            "short nap",
            "def main():\n    return sleepy.nap(ms=50)[\"ms\"]",
            Expect::Value(json!(50)),
        ),
        ordinary(
            "replaced plugin",
            "def main():\n    return versioned.version()[\"version\"]",
            Expect::OneOf(&[1, 2]),
        ),
        ordinary(
            "loop",
            "def main():\n    t = 0\n    for i in range(100000):\n        t += i\n    return t",
            Expect::Value(json!(4_999_950_000_i64)),
        ),
        hostile(
            "nap past the budget",
            "def main():\n    return sleepy.nap(ms=600000)",
            "resource limit exceeded",
        ),
        hostile(
            "spinning plugin",
            "def main():\n    return hostile.spin()",
            "resource limit exceeded",
        ),
        hostile(
            "hoarding plugin",
            "def main():\n    return hostile.hog()",
            "resource limit exceeded",
        ),
        hostile(
            "crashing plugin",
            "def main():\n    return hostile.crash()",
            "capability failed",
        ),
        hostile(
            "endless loop",
            "def main():\n    t = 0\n    for x in range(2147483647):\n        t += 1\n    return t",
            "resource limit exceeded",
        ),
        hostile(
            "a million keys",
            "def main():\n    return {str(i): i for i in range(1000000)}",
            "resource limit exceeded",
        ),
        hostile(
            "huge unknown name",
            // 4 MB: building the name is the program's own work (about 80 ms
            // alone in a release build, 400 ms at 20 MB); with eight clients on
            // two slow CPUs a 20 MB name could reach the 2 s budget, and then the
            // budget, not the lookup, decided the answer.
            "def main():\n    return getattr(records, 'a' * 4000000)(key='x')",
            &format!(
                "invalid program: runtime error at <codemode>:2:12: unknown capability `records.{}…` (find names with search_api)",
                "a".repeat(72)
            ),
        ),
        hostile(
            "policy range",
            "def main():\n    return records.query(filter={}, tags=[], limit=2000000000)[\"total\"]",
            "authorization policy failure",
        ),
        ordinary(
            "upstream echo",
            "def main():\n    return rogue.echo(text=\"x\")[\"text\"]",
            Expect::Value(json!("x")),
        ),
        Case {
            name: "oversized upstream result",
            source: "def main():\n    return rogue.huge()",
            // `rogue` is one Python process answering in turn: a call queued
            // behind other clients' 17 MiB answers on two busy CPUs can reach
            // the time budget before its own answer is read (seen in CI once);
            // no other budget may stop it.
            expect: Expect::Errors(vec![
                "capability failed: upstream rogue sent a result over 16 MiB".to_owned(),
                format!("{RESOURCE_LIMIT} (--max-execution-time)"),
            ]),
            weight: 1,
        },
        Case {
            name: "crashing upstream",
            source: "def main():\n    return crashy.crash()",
            // Also while it restarts: its names stay in the catalog.
            expect: Expect::Errors(vec![
                "capability failed: upstream crashy is unavailable".to_owned(),
            ]),
            weight: 1,
        },
        Case {
            name: "client hangs up",
            source: "def main():\n    return sleepy.nap(ms=600000)",
            expect: Expect::Vanish,
            weight: 1,
        },
    ]
}

/// What one case gave over the whole run.
#[derive(Default)]
struct Tally {
    answered: u64,
    /// Answers that were not what the case expects (the first few kept).
    wrong: Vec<String>,
    wrong_count: u64,
    slowest: Duration,
    /// How often each result of a [`Expect::OneOf`] case came back.
    seen: BTreeMap<i64, u64>,
}

/// One reading of the server process.
#[derive(Clone, Copy)]
struct Sample {
    at: Duration,
    rss: u64,
    threads: u64,
    fds: u64,
}

/// Reads the server process now.
fn read(server: &Server, at: Duration) -> Sample {
    let (threads, fds) = server.threads_and_fds();
    Sample {
        at,
        rss: server.rss(),
        threads,
        fds,
    }
}

/// The server once the load is gone: read when its open files are back to `fds` (the
/// connections the soak closed are closed on its side too), or after [`SETTLE`].
fn idle(server: &Server, fds: u64) -> Sample {
    let deadline = Instant::now() + SETTLE;
    loop {
        let now = read(server, Duration::ZERO);
        if now.fds <= fds || Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn seconds() -> u64 {
    match std::env::var("CODEMODE_SOAK_SECONDS") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("CODEMODE_SOAK_SECONDS={s:?} is not a whole number")),
        Err(_) => DEFAULT_SECONDS,
    }
}

fn host() -> PathBuf {
    std::env::var_os("CODEMODE_SOAK_HOST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_codemode-host")))
}

/// A built plugin component, or a panic saying how to build it.
fn component(dir: &str, name: &str) -> PathBuf {
    let path = root().join(dir).join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} missing: run `cargo xtask plugins`",
        path.display()
    );
    path
}

/// Copies `from` to `folder/name` through a temporary file and a rename, so the
/// server never reads half a component.
fn place(from: &Path, folder: &Path, name: &str) {
    let temp = folder.join(format!(".{name}.tmp"));
    std::fs::copy(from, &temp).expect("copy a plugin");
    std::fs::rename(&temp, folder.join(name)).expect("move a plugin in place");
}

/// The hostile upstreams of the soak, as a config file: `rogue` (a tool schema
/// that explodes when expanded, one nested 300 levels deep, 100 list_changed
/// notifications after every list, a 17 MiB result), `crashy` (exits whenever
/// `crash` is called: a crash loop as fast as the clients call it) and `slow` (its
/// tool list takes 3 s). Names other than the test plugin `hostile`'s root, which
/// an upstream would take.
fn upstreams_config() -> PathBuf {
    let dir = root().join("target/soak-upstreams");
    std::fs::create_dir_all(&dir).expect("create the soak's upstream folder");
    let script = root().join("tests/upstreams/hostile.py");
    let upstream = |name: &str, mode: &str| {
        format!(
            "[[upstream]]\nname = {name:?}\ncommand = [\"python3\", {:?}]\nenv = {{ HOSTILE_MODE = {mode:?}, HOSTILE_SLOW = \"3\" }}\n\n",
            script.display().to_string()
        )
    };
    let text = [
        upstream("rogue", "bomb,deep,flood"),
        upstream("crashy", "crash"),
        upstream("slow", "slowlist"),
    ]
    .concat();
    let path = dir.join("upstreams.toml");
    std::fs::write(&path, text).expect("write the soak's upstreams");
    path
}

/// Waits until `crashy` serves again (it restarts a second after its last crash).
fn crashy_back(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut client = Client::connect(port).expect("connect");
    loop {
        let got = client
            .post(&execute_body(
                "def main():\n    return crashy.echo(text=\"up\")[\"text\"]",
            ))
            .map_err(|e| format!("request failed: {e}"))
            .and_then(|response| answer(&response));
        if got == Ok(json!("up")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "crashy did not come back: {got:?}"
        );
        std::thread::sleep(SAMPLE_EVERY);
    }
}

/// The plugins folder of the soak: three examples, the sleeping, hostile and
/// replaced test plugins, and `drowsy`, whose `describe()` never returns.
fn plugins_folder() -> PathBuf {
    let folder = root().join("target/test-cache/folders/soak");
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).expect("create the soak's plugins folder");
    for name in ["records", "stats", "text"] {
        place(
            &component("target/plugins", name),
            &folder,
            &format!("{name}.wasm"),
        );
    }
    for name in ["sleepy", "hostile", "versioned", "drowsy"] {
        place(
            &component("target/test-plugins", name),
            &folder,
            &format!("{name}.wasm"),
        );
    }
    folder
}

fn execute_body(source: &str) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"source": source}},
    })
    .to_string()
}

/// The error text of a budget that ran out.
const RESOURCE_LIMIT: &str = "resource limit exceeded";

/// The program's answer in a `tools/call` response: its result, or its error
/// text (for a budget that ran out, followed by its flag in parentheses).
fn answer(response: &str) -> Result<Value, String> {
    let message: Value = serde_json::from_str(response)
        .map_err(|e| format!("response is not JSON ({e}): {response}"))?;
    let result = &message["result"];
    if result["isError"] == json!(true) {
        let limit = result["_meta"]["codemode/stats"]["limit"].as_str();
        match (result["content"][0]["text"].as_str(), limit) {
            (Some(RESOURCE_LIMIT), Some(flag)) => Err(format!("{RESOURCE_LIMIT} ({flag})")),
            (Some(text), _) => Err(text.to_owned()),
            (None, _) => Err(format!("error without a text: {response}")),
        }
    } else {
        match result["structuredContent"].get("result") {
            Some(value) => Ok(value.clone()),
            None => Err(format!("result without structuredContent: {response}")),
        }
    }
}

/// Whether the error text `got` is `want`: exactly, or, for a budget that ran
/// out, `want` without the budget's flag or setting (any budget will do).
fn is(want: &str, got: &str) -> bool {
    got == want
        || (want == RESOURCE_LIMIT
            && got
                .strip_prefix(RESOURCE_LIMIT)
                .is_some_and(|flag| flag.starts_with(" (") && flag.ends_with(')')))
}

/// Checks one answer against its case; returns what was wrong, if anything.
fn check(
    case: &Case,
    got: &Result<Value, String>,
    took: Duration,
    tally: &mut Tally,
) -> Option<String> {
    match (&case.expect, got) {
        (Expect::Value(want), Ok(value)) if value == want => None,
        (Expect::OneOf(allowed), Ok(value)) => match value.as_i64() {
            Some(n) if allowed.contains(&n) => {
                *tally.seen.entry(n).or_default() += 1;
                None
            }
            Some(_) | None => Some(format!("{value} is none of {allowed:?}")),
        },
        (Expect::OneOf(_), Err(text)) => Some(format!("got the error {text:?}")),
        (Expect::Error(want), Err(text)) if is(want, text) => {
            (took > BUDGET + SLACK).then(|| format!("answered after {took:?}"))
        }
        (Expect::Errors(wanted), Err(text)) if wanted.iter().any(|want| is(want, text)) => {
            (took > BUDGET + SLACK).then(|| format!("answered after {took:?}"))
        }
        (Expect::Value(_) | Expect::Error(_) | Expect::Errors(_) | Expect::Vanish, got) => {
            Some(format!("got {got:?}"))
        }
    }
}

/// One client: its share of the mix, in its own order, until `until`.
fn client(port: u16, index: usize, until: Instant, tallies: Arc<Mutex<Vec<Tally>>>) {
    let cases = cases();
    let mut round: Vec<usize> = cases
        .iter()
        .enumerate()
        .flat_map(|(i, c)| std::iter::repeat_n(i, c.weight))
        .collect();
    // Each client starts at another point of the round and walks it with another
    // stride, so that the mix on the server differs from moment to moment.
    let stride = [1, 3, 5, 7, 9, 11, 13, 17][index % 8];
    let len = round.len();
    round = (0..len)
        .map(|k| round[(index * 5 + k * stride) % len])
        .collect();
    let mut connection: Option<Client> = None;
    let mut step = 0;
    while Instant::now() < until {
        let which = round[step % round.len()];
        let case = &cases[which];
        step += 1;
        let client = match connection.as_mut() {
            Some(client) => client,
            None => match Client::connect(port) {
                Ok(client) => connection.insert(client),
                Err(e) => panic!("client {index} cannot connect: {e}"),
            },
        };
        let body = execute_body(case.source);
        let sent = Instant::now();
        if let Expect::Vanish = case.expect {
            hang_up(port, &body);
            tallies.lock().expect("tallies")[which].answered += 1;
            continue;
        }
        let got = match client.post(&body) {
            Ok(response) => answer(&response),
            Err(e) => {
                connection = None;
                Err(format!("request failed: {e}"))
            }
        };
        record(
            case,
            &got,
            sent.elapsed(),
            &mut tallies.lock().expect("tallies")[which],
        );
    }
}

/// Cases that write sandbox memory, run [`SLOTS`] at a time before the soak proper.
/// Each pool slot keeps up to 16 MiB of what its last instance wrote resident, and a
/// module's instances reuse the slots they used before: memory grows until every
/// module has met its highest concurrency with its heaviest program, then stays.
/// Warming that up first is what lets the first and last sixths of a short run be
/// compared at all.
const WARM_UP: [&str; 8] = [
    "trivial",
    "lookup",
    "query and summary",
    "word counts",
    "short nap",
    "hoarding plugin",
    "crashing plugin",
    "a million keys",
];

/// Runs each [`WARM_UP`] case [`SLOTS`] times at once, checking every answer.
fn warm_up(port: u16, tallies: &Arc<Mutex<Vec<Tally>>>) {
    let cases = cases();
    for name in WARM_UP {
        let which = cases
            .iter()
            .position(|c| c.name == name)
            .unwrap_or_else(|| panic!("no case {name:?}"));
        let batch: Vec<_> = (0..SLOTS)
            .map(|_| {
                let tallies = tallies.clone();
                std::thread::spawn(move || {
                    let mut client = Client::connect(port).expect("connect");
                    let case = &cases[which];
                    let sent = Instant::now();
                    let got = client
                        .post(&execute_body(case.source))
                        .map_err(|e| format!("request failed: {e}"))
                        .and_then(|response| answer(&response));
                    record(
                        case,
                        &got,
                        sent.elapsed(),
                        &mut tallies.lock().expect("tallies")[which],
                    );
                })
            })
            .collect();
        for request in batch {
            request.join().expect("a warm-up request panicked");
        }
    }
}

/// Counts one answer of `case` in `tally`.
fn record(case: &Case, got: &Result<Value, String>, took: Duration, tally: &mut Tally) {
    tally.answered += 1;
    tally.slowest = tally.slowest.max(took);
    if let Some(wrong) = check(case, got, took, tally) {
        tally.wrong_count += 1;
        if tally.wrong.len() < 3 {
            tally.wrong.push(wrong);
        }
    }
}

/// Posts `body` on a connection of its own and closes it after [`VANISH_AFTER`],
/// without reading the answer.
fn hang_up(port: u16, body: &str) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    std::thread::sleep(VANISH_AFTER);
    drop(stream);
}

/// Opens one unfinished connection: even ones stop inside their headers, odd ones
/// announce a body longer than they send.
fn slow_connection(port: u16, n: usize) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let request = if n.is_multiple_of(2) {
        format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: appl")
    } else {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\""
        )
    };
    stream.write_all(request.as_bytes()).ok()?;
    stream.set_nonblocking(true).ok()?;
    Some(stream)
}

/// Whether the server has closed `stream` (or answered it, which ends it as well).
fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

/// Holds [`SLOW_CONNECTIONS`] unfinished connections until `until`, replacing each
/// one the server closes; returns how many it closed.
fn slow_client(port: u16, until: Instant) -> u64 {
    let mut open: Vec<Option<TcpStream>> = (0..SLOW_CONNECTIONS)
        .map(|n| slow_connection(port, n))
        .collect();
    let mut closed_by_server = 0;
    while Instant::now() < until {
        for (n, slot) in open.iter_mut().enumerate() {
            let gone = slot.as_mut().is_none_or(closed);
            if gone {
                closed_by_server += u64::from(slot.is_some());
                *slot = slow_connection(port, n);
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    closed_by_server
}

/// Swaps the two builds of `versioned` every [`REPLACE_EVERY`] until `until`;
/// returns how many replacements it made.
fn replacer(folder: &Path, until: Instant) -> u64 {
    let builds = [
        component("target/test-plugins", "versioned_two"),
        component("target/test-plugins", "versioned"),
    ];
    let mut made = 0;
    while Instant::now() + REPLACE_EVERY < until {
        std::thread::sleep(REPLACE_EVERY);
        place(&builds[(made % 2) as usize], folder, "versioned.wasm");
        made += 1;
    }
    made
}

#[test]
fn the_server_holds_up_under_ordinary_and_hostile_load() {
    let seconds = seconds();
    let folder = plugins_folder();
    let binary = host();
    // A cache of its own per binary (debug or release): replacing a plugin removes
    // its entries, which the end-to-end tests' shared cache must keep.
    let profile = binary
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "host".to_owned());
    let cache = root().join("target/soak-cache").join(profile);
    let policy = root().join("tests/policies/soak.rego");
    let upstreams = upstreams_config();
    let slots = SLOTS.to_string();
    let mut server = Server::spawn(
        &binary,
        &[
            OsStr::new("--plugins"),
            folder.as_os_str(),
            OsStr::new("--cache-dir"),
            cache.as_os_str(),
            OsStr::new("--policy"),
            policy.as_os_str(),
            OsStr::new("--max-execution-time"),
            OsStr::new("2s"),
            OsStr::new("--max-concurrent-executions"),
            OsStr::new(&slots),
            OsStr::new("--load-timeout"),
            OsStr::new("1s"),
            OsStr::new("--config"),
            upstreams.as_os_str(),
        ],
    );
    let skipped_at_start = server
        .log
        .iter()
        .filter(|l| l.contains("plugin skipped") && l.contains("drowsy.wasm"))
        .count();
    assert_eq!(
        skipped_at_start,
        1,
        "drowsy must be skipped at its load deadline:\n{}",
        server.log.join("\n")
    );

    let port = server.port;
    let tallies = Arc::new(Mutex::new(
        cases().iter().map(|_| Tally::default()).collect::<Vec<_>>(),
    ));
    warm_up(port, &tallies);
    crashy_back(port);
    let before = read(&server, Duration::ZERO);
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|index| {
            let tallies = tallies.clone();
            std::thread::spawn(move || client(port, index, until, tallies))
        })
        .collect();
    let slow = std::thread::spawn(move || slow_client(port, until));
    let replaced = {
        let folder = folder.clone();
        std::thread::spawn(move || replacer(&folder, until))
    };
    let mut samples = Vec::new();
    while Instant::now() < until {
        samples.push(read(&server, started.elapsed()));
        std::thread::sleep(SAMPLE_EVERY);
    }
    for client in clients {
        client.join().expect("a client panicked");
    }
    let closed_by_server = slow.join().expect("the slow client panicked");
    let replacements = replaced.join().expect("the replacer panicked");

    // The report, then the checks.
    let cases = cases();
    let tallies = tallies.lock().expect("tallies");
    println!("soak: {seconds} s, {CLIENTS} clients, budget {BUDGET:?}");
    for (case, tally) in cases.iter().zip(tallies.iter()) {
        let seen = if tally.seen.is_empty() {
            String::new()
        } else {
            format!(", results {:?}", tally.seen)
        };
        println!(
            "  {:<22} {:>6} answered, {} wrong, slowest {:>7.1} ms{seen}",
            case.name,
            tally.answered,
            tally.wrong_count,
            tally.slowest.as_secs_f64() * 1000.0
        );
    }
    // The trend: lowest and highest reading per sixth of the run. In between, a
    // hoarding plugin holds up to the memory cap while it runs, so single readings
    // say little; what the server keeps is read idle, before and after.
    let window = Duration::from_secs(seconds) / 6;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "  {} requests; {replacements} replacements; {closed_by_server} unfinished connections closed by the server",
        tallies.iter().map(|t| t.answered).sum::<u64>()
    );
    println!(
        "  per {:.1} s: RSS MiB low-high / threads / open files (highest)",
        window.as_secs_f64()
    );
    for k in 0..6u32 {
        let of: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.at >= window * k && s.at < window * (k + 1))
            .collect();
        let low = of.iter().map(|s| s.rss).min().unwrap_or(0);
        let high = of.iter().map(|s| s.rss).max().unwrap_or(0);
        println!(
            "    from {:>5.1} s: {:>5.0}-{:<5.0} / {:>3} / {:>4}",
            (window * k).as_secs_f64(),
            mib(low),
            mib(high),
            of.iter().map(|s| s.threads).max().unwrap_or(0),
            of.iter().map(|s| s.fds).max().unwrap_or(0)
        );
    }
    // Its child's pipes are open files: read with it serving, as before.
    crashy_back(port);
    let after = idle(&server, before.fds);
    println!(
        "  idle after the warm-up / after the soak: RSS {:.0} / {:.0} MiB, threads {} / {}, open files {} / {}",
        mib(before.rss),
        mib(after.rss),
        before.threads,
        after.threads,
        before.fds,
        after.fds
    );
    let (rss0, rss1) = (before.rss, after.rss);
    let (fds0, fds1) = (before.fds, after.fds);
    let (thr0, thr1) = (before.threads, after.threads);

    let log = server.log_after_ready();
    let status = server.terminate(Duration::from_secs(10));
    let mut failures = Vec::new();
    for (case, tally) in cases.iter().zip(tallies.iter()) {
        if tally.answered == 0 {
            failures.push(format!("{}: never ran", case.name));
        }
        if tally.wrong_count > 0 {
            failures.push(format!(
                "{}: {} wrong, e.g. {:?}",
                case.name, tally.wrong_count, tally.wrong
            ));
        }
        if let Expect::OneOf(allowed) = case.expect
            && allowed.iter().any(|v| !tally.seen.contains_key(v))
        {
            failures.push(format!(
                "{}: not every version served: {:?}",
                case.name, tally.seen
            ));
        }
    }
    if (rss1 as f64) > rss0 as f64 * (1.0 + RSS_GROWTH) {
        failures.push(format!(
            "resident memory grew from {:.0} to {:.0} MiB",
            mib(rss0),
            mib(rss1)
        ));
    }
    if fds1 > fds0 + FD_GROWTH {
        failures.push(format!("open files grew from {fds0} to {fds1}"));
    }
    if thr1 > thr0 + THREAD_GROWTH {
        failures.push(format!("threads grew from {thr0} to {thr1}"));
    }
    let reloads = log
        .iter()
        .filter(|l| l.contains("catalog reloaded"))
        .count();
    if reloads == 0 {
        failures.push("no reload was logged".to_owned());
    }
    for line in log
        .iter()
        .filter(|l| l.contains("panicked") || l.contains("ERROR"))
        // The crashing test plugin panics on purpose; its stderr reaches the log.
        .filter(|l| !l.contains("panicked at tests/plugins/hostile/"))
        // The crashing upstream is unavailable now and then, on purpose.
        .filter(|l| !l.contains("upstream=crashy"))
        .take(5)
    {
        failures.push(format!("logged: {line}"));
    }
    match status {
        Some(status) if status.success() => {}
        Some(status) => failures.push(format!("SIGTERM ended the server with {status}")),
        None => failures.push("the server did not exit within 10 s of SIGTERM".to_owned()),
    }
    assert!(
        failures.is_empty(),
        "the soak failed:\n{}",
        failures.join("\n")
    );
}

//! Quotas end to end: set in the config file's `[[quota]]` tables, counted in
//! the store (an embedded file that survives a SIGKILL, or a real Redis shared
//! by two replicas), refusing an execution with `resource limit exceeded` and
//! `_meta` naming the quota and when it resets; through the Python SDK client,
//! and raw HTTP where many requests must race.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::support::{
    HttpServer, RedisServer, drive, drive_http, example_plugins, plugin_folder, root, rpc,
    test_plugin, tokens_file, wait_for_audit, wait_until,
};

/// The subjects of these tests and their tokens.
const SUBJECTS: [(&str, &str); 4] = [
    ("alice", "quota-token-of-alice"),
    ("bob", "quota-token-of-bob"),
    ("carol", "quota-token-of-carol"),
    ("dave", "quota-token-of-dave"),
];

/// A fresh folder of the test `label`.
fn folder(label: &str) -> PathBuf {
    let dir = root().join("target/test-cache/quota").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test folder");
    dir
}

/// The config file `text` in `dir`: its path.
fn config(dir: &std::path::Path, text: &str) -> String {
    let file = dir.join("config.toml");
    std::fs::write(&file, text).expect("write the config file");
    file.to_str().expect("utf-8 path").to_owned()
}

/// A server of `plugins` on `store` with the config file `config`, the
/// subjects' tokens, every call allowed.
fn replica(
    label: &str,
    plugins: &std::path::Path,
    store: &str,
    config: &str,
    extra: &[&str],
) -> HttpServer {
    let tokens = tokens_file(label, &SUBJECTS);
    let mut args = vec![
        "--tokens",
        tokens.to_str().expect("utf-8 path"),
        "--store",
        store,
        "--config",
        config,
    ];
    args.extend_from_slice(extra);
    HttpServer::allowing(plugins, &args)
}

/// The driver's step calling `execute` with `source`.
fn execute(source: &str) -> Value {
    json!({"op": "call", "tool": "execute", "arguments": {"source": source}})
}

/// `execute` of `source` as `subject` over raw HTTP: the tool result, `_meta`
/// included.
fn call(server: &HttpServer, subject: usize, source: &str) -> Value {
    call_at(server.port, subject, source)
}

fn call_at(port: u16, subject: usize, source: &str) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "execute", "arguments": {"source": source}}});
    rpc(port, SUBJECTS[subject].1, &request)["result"].clone()
}

/// The quota a raw tool result names, and its seconds until reset; `None`
/// when it succeeded.
fn refusal(result: &Value) -> Option<(String, u64)> {
    if result["isError"] != json!(true) {
        return None;
    }
    assert_eq!(
        result["content"][0]["text"], "resource limit exceeded",
        "{result}"
    );
    let stats = &result["_meta"]["codemode/stats"];
    assert!(
        stats.get("limit").is_none(),
        "a quota names no flag: {result}"
    );
    let quota = &stats["quota"];
    let resets = quota["resets_in_seconds"]
        .as_u64()
        .expect("resets_in_seconds");
    assert!(
        quota["resets_at"]
            .as_str()
            .is_some_and(|at| at.ends_with('Z')),
        "{result}"
    );
    Some((quota["name"].as_str().expect("a name").to_owned(), resets))
}

/// The same for a step of the Python driver.
fn step_refusal(step: &Value) -> Option<(String, u64)> {
    if step["is_error"] != json!(true) {
        return None;
    }
    refusal(&json!({
        "isError": true,
        "content": [{"text": step["text"][0]}],
        "_meta": step["meta"],
    }))
}

/// Two state reads: two native calls.
const TWO_CALLS: &str =
    "def main():\n    state.get(key='a')\n    return state.get(key='b')['found']";

/// One state read.
const ONE_CALL: &str = "def main():\n    return state.get(key='a')['found']";

#[test]
fn a_subject_past_its_daily_calls_is_refused_naming_the_quota_and_a_sigkill_keeps_the_count() {
    early_in_a_minute_and_day(Duration::ZERO);
    let dir = folder("calls");
    let store = dir.join("store.redb");
    let store = store.to_str().expect("utf-8 path");
    let config = config(
        &dir,
        "[[quota]]\nnative-calls-per-day = 3\n\n[[quota]]\nsubject = \"bob\"\nnative-calls-per-day = 100\n\n[[quota]]\nsubject = \"carol\"\nnative-calls-per-day = 1\n\n[[quota]]\nsubject = \"dave\"\nnative-calls-per-day = 100\n\n[[quota]]\ncapability = \"state.get\"\nsubject = \"dave\"\ncalls-per-day = 2\n",
    );
    let plugins = example_plugins();
    let server = replica("quota-calls", &plugins, store, &config, &[]);
    let bearer =
        |subject: usize| json!({ "Authorization": format!("Bearer {}", SUBJECTS[subject].1) });
    // alice: two calls, one call, then the day is spent: refused before it runs.
    let out = drive_http(
        &server.url(),
        bearer(0),
        "legacy",
        json!([execute(TWO_CALLS), execute(ONE_CALL), execute(ONE_CALL)]),
    );
    let steps = &out["results"];
    assert_eq!(steps[0]["structured"], json!({"result": false}), "{out}");
    assert_eq!(steps[1]["structured"], json!({"result": false}), "{out}");
    let (quota, resets) = step_refusal(&steps[2]).expect("the third refused");
    assert_eq!(quota, "native-calls-per-day");
    assert!((1..=86_400).contains(&resets), "{resets}");
    assert_eq!(
        steps[2]["meta"]["codemode/stats"]["native_calls"], 0,
        "{out}"
    );
    // carol has one call a day: a program making two is stopped at the second
    // like at its own budget, the quota named.
    let out = drive_http(
        &server.url(),
        bearer(2),
        "legacy",
        json!([execute(TWO_CALLS)]),
    );
    let step = &out["results"][0];
    let (quota, _) = step_refusal(step).expect("carol stopped");
    assert_eq!(quota, "native-calls-per-day");
    assert_eq!(
        step["meta"]["codemode/error"]["capability"], "state.get",
        "{out}"
    );
    // dave may read the state twice a day.
    assert_eq!(refusal(&call(&server, 3, TWO_CALLS)), None);
    // Killed without a goodbye: the counts are on disk.
    server.signal("KILL");
    let _ = server.wait();
    let again = replica("quota-calls", &plugins, store, &config, &[]);
    assert_eq!(
        refusal(&call(&again, 0, ONE_CALL))
            .map(|(quota, _)| quota)
            .as_deref(),
        Some("native-calls-per-day")
    );
    // bob's own quota is larger.
    assert_eq!(refusal(&call(&again, 1, TWO_CALLS)), None);
    let third = call(&again, 3, ONE_CALL);
    assert_eq!(
        refusal(&third).map(|(quota, _)| quota).as_deref(),
        Some("calls-per-day")
    );
    assert_eq!(
        third["_meta"]["codemode/stats"]["quota"]["capability"], "state.get",
        "{third}"
    );
    let token = format!("Bearer {}", SUBJECTS[1].1);
    let metrics = crate::support::raw_request(
        again.port,
        "GET",
        "/metrics",
        &[("Authorization", &token)],
        "",
    )
    .body;
    assert!(
        metrics.contains("codemode_quota_refusals_total{quota=\"native-calls-per-day\"} 1\n"),
        "{metrics}"
    );
    wait_for_audit(&again, "\"quota\":\"native-calls-per-day\"", 1);
    let audit = again.audit();
    let line = audit
        .lines()
        .find(|line| line.contains("\"quota\""))
        .expect("the refusal's audit line");
    let line: Value = serde_json::from_str(line).expect("a JSON line");
    assert_eq!(line["subject"], "alice");
    assert_eq!(line["capability"], "");
    assert_eq!(line["outcome"], "resource limit exceeded");
    assert_eq!(line["decision"], "not_evaluated");
}

#[test]
fn fuel_per_day_stops_a_running_execution_and_refuses_the_next() {
    early_in_a_minute_and_day(Duration::ZERO);
    let dir = folder("fuel");
    let plugins = plugin_folder("quota-fuel", &[test_plugin("hostile")]);
    let config = config(&dir, "[[quota]]\nfuel-per-day = 300000000\n");
    let out = drive(
        &[
            "--plugins",
            plugins.to_str().expect("utf-8 path"),
            "--allow-all",
            "--store",
            "memory",
            "--config",
            &config,
        ],
        json!([
            execute("def main():\n    return hostile.spin()"),
            execute("def main():\n    return 1"),
        ]),
    );
    let steps = &out["results"];
    let (quota, resets) = step_refusal(&steps[0]).expect("stopped by the quota");
    assert_eq!(quota, "fuel-per-day");
    assert!((1..=86_400).contains(&resets), "{resets}");
    let fuel = steps[0]["meta"]["codemode/stats"]["fuel"]
        .as_u64()
        .expect("fuel");
    assert!((290_000_000..=300_000_000).contains(&fuel), "{out}");
    let (quota, _) = step_refusal(&steps[1]).expect("refused");
    assert_eq!(quota, "fuel-per-day");
    assert_eq!(steps[1]["meta"]["codemode/stats"]["fuel"], 0, "{out}");
}

/// Waits until at least `margin` (under 20 s, the longest wait) is left of
/// the current minute: a test counting executions per minute must not
/// straddle two. The minute's number.
fn early_in_a_minute(margin: Duration) -> u64 {
    early_in_a_minute_and_day(margin).0
}

/// [`early_in_a_minute`], and a minute of the UTC day left (so that a test
/// of the daily quotas, which lasts seconds, does not straddle two): the
/// minute's number and the day's.
pub(crate) fn early_in_a_minute_and_day(margin: Duration) -> (u64, u64) {
    // One reading decides both, so that waiting for one never lands in the
    // other's end (a day's last minute waits at most a minute and a half).
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let now = seconds_now();
        let day_left = 86_400 - now % 86_400;
        let minute_left = Duration::from_secs(60 - now % 60);
        if day_left > 60 + margin.as_secs() && minute_left >= margin {
            return (now / 60, now / 86_400);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no minute with {margin:?} left came"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The minute and the day now, without waiting: what a test checks did not
/// change while it ran.
fn minute_and_day() -> (u64, u64) {
    let now = seconds_now();
    (now / 60, now / 86_400)
}

fn seconds_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

#[test]
fn replicas_share_quotas_through_redis_and_the_last_unit_goes_to_exactly_one() {
    let redis = std::cell::RefCell::new(RedisServer::start("quota"));
    let url = redis.borrow().url();
    let dir = folder("redis");
    let plugins = plugin_folder(
        "quota-redis",
        &[test_plugin("sleepy"), example_plugins().join("text.wasm")],
    );
    let config = config(
        &dir,
        "[[quota]]\nexecutions-per-minute = 3\n\n[[quota]]\nsubject = \"bob\"\nexecutions-per-minute = 1000\nnative-calls-per-day = 1\n\n[[quota]]\nsubject = \"carol\"\nexecutions-per-minute = 1000\nconcurrent-executions = 1\n\n[[quota]]\nsubject = \"dave\"\nexecutions-per-minute = 1000\nnative-calls-per-day = 3\n",
    );
    // A time budget long enough for carol's nap on a busy machine.
    let one = replica(
        "quota-redis",
        &plugins,
        &url,
        &config,
        &["--max-execution-time", "20s"],
    );
    let two = replica(
        "quota-redis",
        &plugins,
        &url,
        &config,
        &["--max-execution-time", "20s", "--quota-fail-open"],
    );
    let trivial = "def main():\n    return 1";
    // alice's three executions a minute, spent across both replicas.
    let minute = early_in_a_minute(Duration::from_secs(15));
    assert_eq!(refusal(&call(&one, 0, trivial)), None);
    assert_eq!(refusal(&call(&two, 0, trivial)), None);
    assert_eq!(refusal(&call(&one, 0, trivial)), None);
    let (quota, resets) = refusal(&call(&two, 0, trivial)).expect("the fourth refused");
    assert_eq!(quota, "executions-per-minute");
    assert!((1..=60).contains(&resets), "{resets}");
    assert_eq!(
        minute_and_day().0,
        minute,
        "the minute ended during the test"
    );
    // bob's one native call of the day, contested by eight executions at
    // once on both replicas: exactly one gets it.
    let ports = [one.port, two.port];
    let results: Vec<Value> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..8)
            .map(|i| {
                let port = ports[i % 2];
                scope.spawn(move || {
                    call_at(
                        port,
                        1,
                        "def main():\n    return text.slugify(text='A B')['slug']",
                    )
                })
            })
            .collect();
        racers
            .into_iter()
            .map(|racer| racer.join().expect("a racer"))
            .collect()
    });
    let won: Vec<&Value> = results.iter().filter(|r| refusal(r).is_none()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert_eq!(won[0]["structuredContent"], json!({"result": "a-b"}));
    for result in results.iter().filter(|r| refusal(r).is_some()) {
        assert_eq!(
            refusal(result).map(|(quota, _)| quota).as_deref(),
            Some("native-calls-per-day")
        );
    }
    // dave's three calls a day: each execution reserves what is left and
    // gives back what it did not spend, through either replica (without the
    // give-back, the second would find nothing left).
    assert_eq!(refusal(&call(&one, 3, ONE_CALL)), None);
    assert_eq!(refusal(&call(&two, 3, TWO_CALLS)), None);
    let (quota, _) = refusal(&call(&one, 3, ONE_CALL)).expect("the day's calls spent");
    assert_eq!(quota, "native-calls-per-day");
    // carol runs one execution at a time, whichever replica serves her.
    let leases = format!("codemode:quota:{}:leases", hex::encode("carol"));
    std::thread::scope(|scope| {
        let napping = scope.spawn(|| call(&one, 2, "def main():\n    return sleepy.nap(ms=5000)"));
        wait_until(
            "carol's first execution to hold its lease",
            || redis.borrow().command(&["ZCARD", &leases]) == ":1",
            || redis.borrow().command(&["ZCARD", &leases]),
        );
        let (quota, resets) = refusal(&call(&two, 2, trivial)).expect("a second at once");
        assert_eq!(quota, "concurrent-executions");
        // Its lease lasts its time budget (20 s) and a margin (10 s).
        assert!(resets <= 30, "{resets}");
        assert_eq!(refusal(&napping.join().expect("the nap")), None);
    });
    assert_eq!(redis.borrow().command(&["ZCARD", &leases]), ":0");
    assert_eq!(refusal(&call(&two, 2, trivial)), None);
    // Redis away: quotas fail closed on one, open on two (`--quota-fail-open`);
    // back, they count again.
    redis.borrow_mut().kill();
    let closed = call(&one, 2, trivial);
    assert_eq!(closed["content"][0]["text"], "internal failure", "{closed}");
    assert_eq!(refusal(&call(&two, 2, trivial)), None);
    assert!(
        one.log()
            .contains("the quotas cannot be checked: the store did not answer"),
        "{}",
        one.log()
    );
    redis.borrow_mut().restart();
    assert_eq!(refusal(&call(&one, 2, trivial)), None);
}

/// Slugifies twice: two calls of `text.slugify`.
const TWO_SLUGS: &str =
    "def main():\n    text.slugify(text='A B')\n    return text.slugify(text='C D')['slug']";

#[test]
fn a_capabilitys_calls_are_counted_across_replicas_and_the_last_one_goes_to_exactly_one() {
    let redis = std::cell::RefCell::new(RedisServer::start("quota-calls"));
    let url = redis.borrow().url();
    let dir = folder("capability");
    let plugins = plugin_folder("quota-capability", &[example_plugins().join("text.wasm")]);
    // alice: three slugs a day; bob: his own hundred; dave: one, contested.
    let config = config(
        &dir,
        "[[quota]]\ncapability = \"text.slugify\"\ncalls-per-day = 3\n\n[[quota]]\ncapability = \"text.slugify\"\nsubject = \"bob\"\ncalls-per-day = 100\n\n[[quota]]\ncapability = \"text.slugify\"\nsubject = \"dave\"\ncalls-per-day = 1\n",
    );
    let one = replica("quota-capability", &plugins, &url, &config, &[]);
    let two = replica(
        "quota-capability",
        &plugins,
        &url,
        &config,
        &["--quota-fail-open"],
    );
    let (_, day) = early_in_a_minute_and_day(Duration::ZERO);
    // alice, through the Python SDK: two slugs through one, then one more
    // through two; the fourth is refused where the program calls it.
    let bearer = json!({ "Authorization": format!("Bearer {}", SUBJECTS[0].1) });
    let out = drive_http(
        &one.url(),
        bearer.clone(),
        "legacy",
        json!([execute(TWO_SLUGS)]),
    );
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": "c-d"}),
        "{out}"
    );
    let out = drive_http(&two.url(), bearer, "legacy", json!([execute(TWO_SLUGS)]));
    let step = &out["results"][0];
    let (quota, resets) = step_refusal(step).expect("the fourth slug refused");
    assert_eq!(quota, "calls-per-day");
    assert!((1..=86_400).contains(&resets), "{resets}");
    let stats = &step["meta"]["codemode/stats"];
    assert_eq!(stats["quota"]["capability"], "text.slugify", "{out}");
    assert_eq!(stats["native_calls"], 2, "{out}");
    assert_eq!(
        step["meta"]["codemode/error"]["capability"], "text.slugify",
        "{out}"
    );
    assert_eq!(step["meta"]["codemode/error"]["line"], 3, "{out}");
    // Her other capabilities are not counted, and neither are others' calls.
    let words = "def main():\n    return text.word_counts(text='a a')['counts']['a']";
    assert_eq!(
        call(&one, 0, words)["structuredContent"],
        json!({"result": 2})
    );
    for _ in 0..2 {
        assert_eq!(refusal(&call(&two, 1, TWO_SLUGS)), None);
    }
    // dave's one slug of the day, contested by eight executions at once on
    // both replicas: exactly one gets it.
    let ports = [one.port, two.port];
    let slug = "def main():\n    return text.slugify(text='A B')['slug']";
    let results: Vec<Value> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..8)
            .map(|i| scope.spawn(move || call_at(ports[i % 2], 3, slug)))
            .collect();
        racers
            .into_iter()
            .map(|racer| racer.join().expect("a racer"))
            .collect()
    });
    let won: Vec<&Value> = results.iter().filter(|r| refusal(r).is_none()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert_eq!(won[0]["structuredContent"], json!({"result": "a-b"}));
    for result in results.iter().filter(|r| refusal(r).is_some()) {
        assert_eq!(
            refusal(result).map(|(quota, _)| quota).as_deref(),
            Some("calls-per-day")
        );
    }
    // Each refusal counted where it happened (alice's and seven of dave's),
    // and written to the audit log naming the quota and the capability.
    let refusals = |server: &HttpServer| -> u64 {
        let token = format!("Bearer {}", SUBJECTS[1].1);
        let metrics = crate::support::raw_request(
            server.port,
            "GET",
            "/metrics",
            &[("Authorization", &token)],
            "",
        )
        .body;
        metrics
            .lines()
            .find_map(|line| {
                line.strip_prefix("codemode_quota_refusals_total{quota=\"calls-per-day\"} ")
            })
            .map_or(0, |count| count.parse().expect("a count"))
    };
    assert_eq!(refusals(&one) + refusals(&two), 8);
    wait_for_audit(&two, "\"quota\":\"calls-per-day\"", 1);
    let audit = two.audit();
    let line: Value = audit
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["subject"] == "alice" && line["quota"] == "calls-per-day")
        .expect("alice's refusal in the audit log");
    assert_eq!(line["capability"], "text.slugify");
    assert_eq!(line["decision"], "allow");
    assert_eq!(line["outcome"], "resource limit exceeded");
    // Redis away: the call fails closed on one, runs on two
    // (`--quota-fail-open`); back, it is counted again.
    redis.borrow_mut().kill();
    let closed = call(&one, 1, TWO_SLUGS);
    assert_eq!(closed["content"][0]["text"], "internal failure", "{closed}");
    assert_eq!(
        closed["_meta"]["codemode/error"]["capability"], "text.slugify",
        "{closed}"
    );
    assert_eq!(refusal(&call(&two, 0, TWO_SLUGS)), None);
    assert!(
        one.log()
            .contains("a call's quotas cannot be checked: the store did not answer"),
        "{}",
        one.log()
    );
    redis.borrow_mut().restart();
    assert_eq!(
        refusal(&call(&one, 0, slug))
            .map(|(quota, _)| quota)
            .as_deref(),
        Some("calls-per-day")
    );
    assert_eq!(minute_and_day().1, day, "the day ended during the test");
}

#[test]
fn a_reload_of_the_config_file_applies_changed_quotas_to_the_next_executions() {
    early_in_a_minute_and_day(Duration::ZERO);
    let dir = folder("reload");
    let path = config(&dir, "[[quota]]\nnative-calls-per-day = 1\n");
    // Replaced the way editors and config managers do: renamed over it.
    let rewrite = |text: &str| {
        let temp = dir.join("config.new");
        std::fs::write(&temp, text).expect("write the new config");
        std::fs::rename(&temp, &path).expect("rename it in place");
    };
    let server = replica("quota-reload", &example_plugins(), "memory", &path, &[]);
    assert_eq!(refusal(&call(&server, 0, ONE_CALL)), None);
    assert_eq!(
        refusal(&call(&server, 0, ONE_CALL))
            .map(|(quota, _)| quota)
            .as_deref(),
        Some("native-calls-per-day")
    );
    // Three a day: two more today, the count kept.
    rewrite("[[quota]]\nnative-calls-per-day = 3\n");
    crate::support::wait_for_log(&server, "quotas=\"changed\"", 1);
    assert_eq!(refusal(&call(&server, 0, TWO_CALLS)), None);
    assert_eq!(
        refusal(&call(&server, 0, ONE_CALL))
            .map(|(quota, _)| quota)
            .as_deref(),
        Some("native-calls-per-day")
    );
    // No table: no quota.
    rewrite("max-native-calls = 100\n");
    crate::support::wait_for_log(&server, "quotas=\"changed\"", 2);
    assert_eq!(refusal(&call(&server, 0, ONE_CALL)), None);
}

#[test]
fn the_quota_scripts_count_a_lease_once_however_often_they_are_sent() {
    let redis = RedisServer::start("quota-scripts");
    let admit = include_str!("../host/server/src/store/scripts/quota_admit.lua");
    let release = include_str!("../host/server/src/store/scripts/quota_release.lua");
    let extend = include_str!("../host/server/src/store/scripts/quota_extend.lua");
    let keys = [
        "codemode:quota:6f:counts",
        "codemode:quota:6f:leases",
        "codemode:quota:6f:held",
        "codemode:quota:6f:released",
    ];
    // The script's answer: its first `lines` lines.
    let run = |script: &str, args: &[&str], lines: usize| {
        let mut all = vec!["EVAL", script, "4", keys[0], keys[1], keys[2], keys[3]];
        all.extend_from_slice(args);
        redis.answer_lines(&all, lines)
    };
    // Four calls a day and two executions a minute, no fuel quota (-1); the
    // budgets allow three calls and a thousand fuel.
    let admit_lease = |lease: &str| {
        run(
            admit,
            &[lease, "60000", "2", "4", "-1", "-1", "3", "1000"],
            5,
        )
    };
    let granted = |calls: &str| -> Vec<String> {
        ["*3", "$7", "granted", calls, ":-1"]
            .map(str::to_owned)
            .to_vec()
    };
    let count = |quota: &str| {
        redis
            .text(&["HGET", keys[0], quota])
            .and_then(|count| count.split(' ').nth(1).map(str::to_owned))
    };
    let ends = |lease: &str| {
        redis
            .text(&["ZSCORE", keys[1], lease])
            .and_then(|score| score.parse::<u64>().ok())
    };
    let (minute, day) = early_in_a_minute_and_day(Duration::from_secs(10));
    // Sent twice (its first answer lost): counted once, the same answer.
    assert_eq!(admit_lease("77"), granted(":3"));
    assert_eq!(admit_lease("77"), granted(":3"));
    assert_eq!(count("executions-per-minute").as_deref(), Some("1"));
    assert_eq!(count("native-calls-per-day").as_deref(), Some("3"));
    assert_eq!(count("fuel-per-day"), None);
    // The second lease gets the one call left.
    assert_eq!(admit_lease("78"), granted(":1"));
    assert_eq!(count("native-calls-per-day").as_deref(), Some("4"));
    // Made to last a wait: later, once; a lease gone stays gone.
    let before = ends("78").expect("78's end");
    assert_eq!(run(extend, &["78", "600000"], 1), [":1"]);
    let after = ends("78").expect("78's end");
    assert!(after >= before + 500_000, "{before} {after}");
    assert_eq!(run(extend, &["78", "1000"], 1), [":0"]);
    assert_eq!(ends("78"), Some(after));
    assert_eq!(run(extend, &["76", "600000"], 1), [":0"]);
    assert_eq!(ends("76"), None);
    // 77 made one call: two come back, once, however often its end is sent.
    assert_eq!(run(release, &["77", "1", "500"], 1), [":1"]);
    assert_eq!(run(release, &["77", "1", "500"], 1), [":0"]);
    assert_eq!(count("native-calls-per-day").as_deref(), Some("2"));
    assert_eq!(redis.command(&["ZCARD", keys[1]]), ":1");
    // Released before its admission ran (its answer lost, say): when that
    // admission comes, it counts nothing and holds nothing.
    assert_eq!(run(release, &["80", "0", "0"], 1), [":0"]);
    assert_eq!(
        run(
            admit,
            &["80", "60000", "-1", "4", "-1", "-1", "3", "1000"],
            5
        ),
        ["*3", "$7", "granted", ":-1", ":-1"]
    );
    assert_eq!(count("native-calls-per-day").as_deref(), Some("2"));
    assert_eq!(redis.command(&["HEXISTS", keys[2], "80"]), ":0");
    assert_eq!(redis.command(&["ZCARD", keys[1]]), ":1");
    // The minute's two executions are spent: a third lease is refused, and
    // counts nothing.
    let refused = run(
        admit,
        &["79", "60000", "2", "4", "-1", "-1", "3", "1000"],
        6,
    );
    assert_eq!(
        refused[..5],
        ["*3", "$7", "refused", "$21", "executions-per-minute"]
    );
    assert_eq!(count("executions-per-minute").as_deref(), Some("2"));
    assert_eq!(redis.command(&["HEXISTS", keys[2], "79"]), ":0");
    assert_eq!(
        minute_and_day(),
        (minute, day),
        "the minute ended during the test"
    );
}

#[test]
fn the_call_script_counts_a_call_once_however_often_it_is_sent() {
    let redis = RedisServer::start("quota-call-script");
    let script = include_str!("../host/server/src/store/scripts/quota_call.lua");
    let keys = ["codemode:quota:6f:counts", "codemode:quota:6f:calls"];
    // The script's answer for `call` of `capability` under the minute's and
    // the day's limits (-1 for none): its first `lines` lines.
    let run = |call: &str, capability: &str, limits: [&str; 2], lines: usize| {
        redis.answer_lines(
            &[
                "EVAL", script, "2", keys[0], keys[1], call, capability, limits[0], limits[1],
            ],
            lines,
        )
    };
    let counted = ["*1", "$7", "counted"].map(str::to_owned).to_vec();
    let count = |field: &str| {
        redis
            .text(&["HGET", keys[0], field])
            .and_then(|count| count.split(' ').nth(1).map(str::to_owned))
    };
    let (minute, day) = early_in_a_minute_and_day(Duration::from_secs(10));
    // Two a minute, three a day; sent twice (its first answer lost): counted
    // once.
    assert_eq!(run("1", "notes.write", ["2", "3"], 3), counted);
    assert_eq!(run("1", "notes.write", ["2", "3"], 3), counted);
    assert_eq!(count("calls-per-minute notes.write").as_deref(), Some("1"));
    assert_eq!(count("calls-per-day notes.write").as_deref(), Some("1"));
    assert_eq!(run("2", "notes.write", ["2", "3"], 3), counted);
    // The minute's two are spent: refused, and the day counts nothing more.
    let refused = run("3", "notes.write", ["2", "3"], 6);
    assert_eq!(
        refused[..5],
        ["*3", "$7", "refused", "$16", "calls-per-minute"]
    );
    assert_eq!(count("calls-per-day notes.write").as_deref(), Some("2"));
    // Another capability has its own counts; no minute quota (-1), none kept.
    assert_eq!(run("4", "notes.read", ["-1", "1"], 3), counted);
    assert_eq!(count("calls-per-minute notes.read"), None);
    let refused = run("5", "notes.read", ["-1", "1"], 6);
    assert_eq!(
        refused[..5],
        ["*3", "$7", "refused", "$13", "calls-per-day"]
    );
    // Both spent: the day, which allows more last, is named.
    assert_eq!(run("6", "notes.once", ["1", "1"], 3), counted);
    let refused = run("7", "notes.once", ["1", "1"], 6);
    assert_eq!(
        refused[..5],
        ["*3", "$7", "refused", "$13", "calls-per-day"]
    );
    // A peek (before a human is asked) says the same and counts nothing.
    let peek = |capability: &str, lines: usize| {
        redis.answer_lines(
            &[
                "EVAL", script, "2", keys[0], keys[1], "0", capability, "-1", "1", "peek",
            ],
            lines,
        )
    };
    assert_eq!(peek("notes.fresh", 3), counted);
    assert_eq!(peek("notes.fresh", 3), counted);
    assert_eq!(count("calls-per-day notes.fresh"), None);
    assert_eq!(
        peek("notes.read", 6)[..5],
        ["*3", "$7", "refused", "$13", "calls-per-day"]
    );
    assert_eq!(
        minute_and_day(),
        (minute, day),
        "the minute ended during the test"
    );
}

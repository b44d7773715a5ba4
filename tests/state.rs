//! The state capabilities end to end, through the Python SDK client: values an
//! agent keeps from one execution to the next, per subject, in a store file that
//! survives a SIGKILL and that two server processes share; their limits, named
//! by flag; the policy deciding them like any capability.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::{
    HttpServer, drive, drive_http, example_plugins, root, tokens_file, wait_for_audit, wait_until,
};

/// Two subjects of the HTTP tests.
const SUBJECTS: [(&str, &str); 2] = [
    ("alice", "state-token-of-alice"),
    ("bob", "state-token-of-bob"),
];

/// A store file of its own for the test `label`, in a fresh folder.
fn store_file(label: &str) -> PathBuf {
    let dir = root().join("target/test-cache/state").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("store.redb")
}

/// The driver's step calling `execute` with `source`.
fn execute(source: &str) -> Value {
    json!({"op": "call", "tool": "execute", "arguments": {"source": source}})
}

/// What an execution returned (its `result`), failing the test on an error.
fn result(step: &Value) -> &Value {
    assert_eq!(step["is_error"], json!(false), "{step}");
    &step["structured"]["result"]
}

/// The `Authorization` header of `token`.
fn bearer(token: &str) -> Value {
    json!({ "Authorization": format!("Bearer {token}") })
}

const KEEP: &str = "def main():\n    state.put(key='notes/1', value={'seen': [1, 2.5, 'x', None, True]})\n    return state.put(key='notes/2', value='second', ttl=3600)";

const READ_BACK: &str = "def main():\n    return [state.get(key='notes/1'), state.list(prefix='notes/'), state.get(key='nope'), state.delete(key='notes/2'), state.list()]";

const KEPT: &str = "def main():\n    return state.get(key='notes/1')['value']";

#[test]
fn an_agent_finds_the_state_and_keeps_values_from_one_execution_to_the_next() {
    let store = store_file("stdio");
    let plugins = example_plugins();
    let args = [
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
        "--store",
        store.to_str().expect("utf-8 path"),
    ];
    let out = drive(
        &args,
        json!([
            {"op": "call", "tool": "search_api", "arguments": {"query": "remember a value for a later execution"}},
            {"op": "call", "tool": "describe_api", "arguments": {"name": "state.put"}},
            execute(KEEP),
            execute(READ_BACK),
        ]),
    );
    let found: Vec<&str> = out["results"][0]["structured"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(found.contains(&"state.put"), "{found:?}");
    let described = &out["results"][1]["structured"];
    assert_eq!(
        described["signature"],
        "state.put(*, key: str, value: any, ttl: int | None)"
    );
    assert!(
        described["description"]
            .as_str()
            .is_some_and(|d| d.contains("even when the execution fails afterwards")),
        "{described}"
    );
    assert_eq!(result(&out["results"][2]), &json!({"replaced": false}));
    assert_eq!(
        result(&out["results"][3]),
        &json!([
            {"found": true, "value": {"seen": [1, 2.5, "x", null, true]}},
            {"keys": ["notes/1", "notes/2"]},
            {"found": false, "value": null},
            {"deleted": true},
            {"keys": ["notes/1"]},
        ])
    );
    // Another server process, later: the value outlived the first. The
    // README's two programs, one execution each.
    let [keep, read] = readme_programs();
    let out = drive(
        &args,
        json!([execute(KEPT), execute(&keep), execute(&read)]),
    );
    assert_eq!(
        result(&out["results"][0]),
        &json!({"seen": [1, 2.5, "x", null, true]})
    );
    let total = result(&out["results"][1]).as_u64().expect("a count");
    let read = result(&out["results"][2]);
    let books = read["books"].as_array().expect("the kept keys");
    assert!(
        total > 0 && books.len() as u64 == total.min(20),
        "{total}: {read}"
    );
    assert!(
        books
            .iter()
            .all(|key| key.as_str().is_some_and(|k| k.starts_with("bk-"))),
        "{read}"
    );
    assert_eq!(read["keys"], json!(["reading/classics"]));
}

/// The two programs of the README's "State across executions".
fn readme_programs() -> [String; 2] {
    let readme = include_str!("../README.md");
    let section = readme
        .split("### State across executions")
        .nth(1)
        .expect("the README's state section");
    let programs: Vec<String> = section
        .split("```python\n")
        .skip(1)
        .take(2)
        .map(|block| block.split("```").next().unwrap_or_default().to_owned())
        .collect();
    match <[String; 2]>::try_from(programs) {
        Ok(programs) => programs,
        Err(found) => panic!("two programs in the README's state section: {found:?}"),
    }
}

/// A server of the example plugins on the store file `store`, the two subjects'
/// tokens, every call allowed.
fn replica(label: &str, store: &std::path::Path, extra: &[&str]) -> HttpServer {
    replica_at(label, store.to_str().expect("utf-8 path"), extra)
}

/// [`replica`] on the store `store` (a file, or a Redis URL).
fn replica_at(label: &str, store: &str, extra: &[&str]) -> HttpServer {
    let tokens = tokens_file(label, &SUBJECTS);
    let mut args = vec![
        "--tokens",
        tokens.to_str().expect("utf-8 path"),
        "--store",
        store,
    ];
    args.extend_from_slice(extra);
    HttpServer::allowing(&example_plugins(), &args)
}

/// Runs `source` as `subject` (its token) over HTTP: the step's report.
fn execute_as(server: &HttpServer, subject: usize, source: &str) -> Value {
    let out = drive_http(
        &server.url(),
        bearer(SUBJECTS[subject].1),
        "legacy",
        json!([execute(source)]),
    );
    out["results"][0].clone()
}

#[test]
fn two_servers_share_the_store_each_subject_sees_its_own_and_a_sigkill_loses_nothing() {
    let store = store_file("replicas");
    let one = replica("state-replicas", &store, &[]);
    let two = replica("state-replicas", &store, &[]);
    let put = |server: &HttpServer, subject: usize, value: &str| {
        let source = format!("def main():\n    return state.put(key='plan', value=\"{value}\")");
        result(&execute_as(server, subject, &source)).clone()
    };
    let get = "def main():\n    return state.get(key='plan')";
    assert_eq!(put(&one, 0, "alice's"), json!({"replaced": false}));
    // Through the other process: alice's value, and bob has none of his own.
    assert_eq!(
        result(&execute_as(&two, 0, get)),
        &json!({"found": true, "value": "alice's"})
    );
    assert_eq!(
        result(&execute_as(&two, 1, get)),
        &json!({"found": false, "value": null})
    );
    assert_eq!(put(&two, 1, "bob's"), json!({"replaced": false}));
    assert_eq!(
        result(&execute_as(&one, 0, "def main():\n    return state.list()")),
        &json!({"keys": ["plan"]})
    );
    assert_eq!(put(&two, 0, "alice's second"), json!({"replaced": true}));
    // Killed without a chance to flush: every answered write is on disk.
    one.signal("KILL");
    two.signal("KILL");
    let (_, _) = (one.wait(), two.wait());
    let again = replica("state-replicas", &store, &[]);
    assert_eq!(
        result(&execute_as(&again, 0, get)),
        &json!({"found": true, "value": "alice's second"})
    );
    assert_eq!(
        result(&execute_as(&again, 1, get)),
        &json!({"found": true, "value": "bob's"})
    );
}

#[test]
fn the_state_limits_end_the_execution_naming_their_flag_and_keep_what_was_written() {
    let store = store_file("limits");
    let server = replica(
        "state-limits",
        &store,
        &[
            "--max-state-keys",
            "2",
            "--max-state-bytes",
            "30",
            "--max-state-value-bytes",
            "16",
        ],
    );
    let cases = [
        (
            "--max-state-keys",
            "def main():\n    state.put(key='a', value=1)\n    state.put(key='b', value=2)\n    return state.put(key='c', value=3)",
        ),
        (
            "--max-state-value-bytes",
            "def main():\n    return state.put(key='a', value='x' * 15)",
        ),
        (
            "--max-state-bytes",
            "def main():\n    state.put(key='a', value='x' * 12)\n    state.put(key='b', value='y' * 12)\n    return state.put(key='b', value='z' * 14)",
        ),
    ];
    for (flag, source) in cases {
        let step = execute_as(&server, 0, source);
        assert_eq!(step["is_error"], json!(true), "{flag}: {step}");
        assert_eq!(step["text"][0], "resource limit exceeded", "{flag}: {step}");
        assert_eq!(
            step["meta"]["codemode/stats"]["limit"], flag,
            "{flag}: {step}"
        );
    }
    // What the failed executions wrote before their limit stays written; the
    // refused writes changed nothing.
    let kept = "def main():\n    return [state.get(key=k)['value'] for k in ['a', 'b', 'c']]";
    assert_eq!(
        result(&execute_as(&server, 0, kept)),
        &json!(["x".repeat(12), "y".repeat(12), null])
    );
    // A value past its ttl reads as absent (the wait has a deadline; one
    // second of ttl is the shortest).
    let put = "def main():\n    return state.put(key='brief', value=1, ttl=1)";
    assert_eq!(
        result(&execute_as(&server, 1, put)),
        &json!({"replaced": false})
    );
    let token = SUBJECTS[1].1;
    let read = "def main():\n    return state.get(key='brief')['found']";
    wait_until(
        "the value past its ttl to read as absent",
        || crate::support::execute_as(server.port, token, read) == Ok(json!(false)),
        || format!("{:?}", crate::support::execute_as(server.port, token, read)),
    );
    // A bad key or ttl is the call's failure, said plainly.
    let step = execute_as(
        &server,
        1,
        "def main():\n    return state.put(key='', value=1)",
    );
    assert_eq!(
        step["text"][0], "capability failed: a key must be 1 to 256 bytes",
        "{step}"
    );
    let step = execute_as(
        &server,
        1,
        "def main():\n    return state.put(key='k', value=1, ttl=0)",
    );
    assert_eq!(
        step["text"][0], "capability failed: ttl must be 1 to 315360000 seconds, or None",
        "{step}"
    );
}

#[test]
fn the_policy_decides_state_calls_by_their_ids() {
    let store = store_file("policy");
    let dir = store.parent().expect("the store's folder");
    std::fs::create_dir_all(dir).expect("make the test's folder");
    let policy = dir.join("read-only.rego");
    std::fs::write(
        &policy,
        "package codemode.authz\n\ndefault allow := false\n\nallow if input.capability.id in {\"state.get\", \"state.list\"}\n",
    )
    .expect("write the policy");
    let tokens = tokens_file("state-policy", &SUBJECTS);
    let plugins = example_plugins();
    let server = HttpServer::start(&[
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
        "--tokens",
        tokens.to_str().expect("utf-8 path"),
        "--policy",
        policy.to_str().expect("utf-8 path"),
        "--store",
        store.to_str().expect("utf-8 path"),
    ]);
    let step = execute_as(
        &server,
        0,
        "def main():\n    return state.put(key='k', value=1)",
    );
    assert_eq!(step["text"][0], "permission denied", "{step}");
    assert_eq!(
        result(&execute_as(
            &server,
            0,
            "def main():\n    return state.list()"
        )),
        &json!({"keys": []})
    );
    wait_for_audit(&server, "\"capability_id\":\"state.put\"", 1);
}

#[test]
fn replicas_share_the_state_through_redis_and_a_redis_away_fails_the_call_plainly() {
    let mut redis = crate::support::RedisServer::start("state");
    let url = redis.url();
    let limits = ["--max-state-keys", "2", "--max-state-bytes", "4KiB"];
    let one = replica_at("state-redis", &url, &limits);
    let two = replica_at("state-redis", &url, &limits);
    let put = |server: &HttpServer, subject: usize, key: &str, value: &str| {
        let source =
            format!("def main():\n    return state.put(key='{key}', value={value}, ttl=3600)");
        execute_as(server, subject, &source)
    };
    let get = |key: &str| format!("def main():\n    return state.get(key='{key}')");
    assert_eq!(
        result(&put(&one, 0, "plan", "{'steps': [1, 2]}")),
        &json!({"replaced": false})
    );
    assert_eq!(
        result(&execute_as(&two, 0, &get("plan"))),
        &json!({"found": true, "value": {"steps": [1, 2]}})
    );
    assert_eq!(
        result(&execute_as(&two, 1, &get("plan"))),
        &json!({"found": false, "value": null})
    );
    // The limit holds across the replicas: alice's second key through one, her
    // third through the other is refused.
    assert_eq!(
        result(&put(&two, 0, "notes", "'n'")),
        &json!({"replaced": false})
    );
    let third = put(&one, 0, "more", "1");
    assert_eq!(third["text"][0], "resource limit exceeded", "{third}");
    assert_eq!(third["meta"]["codemode/stats"]["limit"], "--max-state-keys");
    assert_eq!(
        result(&execute_as(
            &one,
            0,
            "def main():\n    return [state.list(), state.delete(key='notes'), state.list(prefix='p')]"
        )),
        &json!([{"keys": ["notes", "plan"]}, {"deleted": true}, {"keys": ["plan"]}])
    );
    // The scripts' other rules, as the embedded store's: a replacement, the
    // bytes limit, an expired value read as absent and removed (with its
    // charge) by the owner's next write, and the usage made again from the
    // values when its hash is gone.
    assert_eq!(
        result(&put(&two, 1, "b", "'x' * 10")),
        &json!({"replaced": false})
    );
    assert_eq!(
        result(&put(&one, 1, "b", "'y'")),
        &json!({"replaced": true})
    );
    let usage = format!("codemode:state:{}:usage", hex::encode("bob"));
    let keys_of_bob = || redis.command(&["HINCRBY", &usage, "keys", "0"]);
    let brief = "def main():\n    return state.put(key='brief', value=1, ttl=1)";
    assert_eq!(
        result(&execute_as(&one, 1, brief)),
        &json!({"replaced": false})
    );
    assert_eq!(keys_of_bob(), ":2");
    let bob = SUBJECTS[1].1;
    let found = "def main():\n    return state.get(key='brief')['found']";
    wait_until(
        "bob's brief value to read as absent",
        || crate::support::execute_as(two.port, bob, found) == Ok(json!(false)),
        || format!("{:?}", crate::support::execute_as(two.port, bob, found)),
    );
    assert_eq!(redis.command(&["DEL", &usage]), ":1");
    assert_eq!(result(&put(&two, 1, "c", "2")), &json!({"replaced": false}));
    assert_eq!(keys_of_bob(), ":2");
    let over = execute_as(
        &one,
        1,
        "def main():\n    return state.put(key='c', value='z' * 5000)",
    );
    assert_eq!(
        over["meta"]["codemode/stats"]["limit"], "--max-state-bytes",
        "{over}"
    );
    // Redis away: the call fails plainly (the reason in the log), the server
    // serves on, and the state is back with Redis.
    redis.kill();
    let away = execute_as(&one, 0, &get("plan"));
    assert_eq!(
        away["text"][0], "capability failed: the state store is unavailable",
        "{away}"
    );
    assert!(
        one.log()
            .contains("a state call failed: the store did not answer"),
        "{}",
        one.log()
    );
    // Back: the first call already reads it (the broken connection is found
    // and the request sent again on a new one).
    redis.restart();
    assert_eq!(
        result(&execute_as(&one, 0, &get("plan"))),
        &json!({"found": true, "value": {"steps": [1, 2]}})
    );
}

//! Rego authorization over stdio, through the Python MCP client: who may call what,
//! the exact texts, what the audit log records, and that neither the client's
//! `_meta` nor the policy's own words decide or leak anything.

use serde_json::{Value, json};

use crate::stdio::{call, err, ok};
use crate::support::{drive, example_plugins, root};

const LOOKUP: &str = "def main():\n    return records.lookup(key=\"bk-0001\")[\"title\"]";
const QUERY: &str =
    "def main():\n    return records.query(filter={\"genre\": \"fantasy\"}, tags=[])[\"total\"]";
const BAD_ARGUMENTS: &str = "def main():\n    return records.lookup(key=1)";

fn policy(name: &str) -> String {
    root()
        .join("tests/policies")
        .join(name)
        .to_str()
        .expect("utf-8 path")
        .to_owned()
}

fn execute(source: &str) -> Value {
    call("execute", json!({ "source": source }))
}

/// A fresh audit log path for one test.
fn audit_path(label: &str) -> std::path::PathBuf {
    let dir = root().join("target/test-cache/audit");
    std::fs::create_dir_all(&dir).expect("create the audit folder");
    let path = dir.join(format!("{label}.jsonl"));
    let _ = std::fs::remove_file(&path);
    path
}

/// Runs `steps` against a stdio server with the example plugins, the analyst policy,
/// `--subject subject` and an audit log; returns the client's results and the audit
/// lines.
fn serve(label: &str, subject: &str, steps: Value) -> (Vec<Value>, Vec<Value>) {
    let plugins = example_plugins();
    let audit = audit_path(label);
    let out = drive(
        &[
            "--plugins",
            plugins.to_str().expect("utf-8 path"),
            "--policy",
            &policy("analyst.rego"),
            "--subject",
            subject,
            "--audit-log",
            audit.to_str().expect("utf-8 path"),
        ],
        steps,
    );
    let text = std::fs::read_to_string(&audit).unwrap_or_default();
    assert!(
        !text.contains("bk-0001"),
        "argument values in the audit log:\n{text}"
    );
    assert!(
        !text.contains("CANARY"),
        "policy text in the audit log:\n{text}"
    );
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("an audit line is JSON"))
        .collect();
    let results = out["results"].as_array().expect("results").clone();
    assert!(
        !out.to_string().contains("CANARY"),
        "policy text reached the client: {out}"
    );
    (results, lines)
}

/// The audit fields that do not vary from run to run.
fn stable(line: &Value) -> Value {
    let mut line = line.clone();
    let object = line.as_object_mut().expect("an audit line is an object");
    for key in ["time", "fuel", "duration_us"] {
        assert!(
            object.remove(key).is_some(),
            "audit line lacks {key}: {object:?}"
        );
    }
    line
}

#[test]
fn the_policy_allows_the_analyst_to_look_up_and_nothing_else() {
    let (results, audit) = serve(
        "analyst",
        "analyst",
        json!([execute(LOOKUP), execute(QUERY), execute(BAD_ARGUMENTS)]),
    );
    assert_eq!(ok(&results[0]), &json!({"result": "The Burning Tide"}));
    assert_eq!(err(&results[1]), "permission denied");
    assert_eq!(
        err(&results[2]),
        "invalid capability arguments: argument \"key\" must be a string"
    );
    let stable: Vec<Value> = audit.iter().map(stable).collect();
    assert_eq!(
        stable,
        vec![
            json!({"execution": 1, "subject": "analyst", "capability_id": "records.lookup", "capability": "records.lookup", "decision": "allow", "outcome": "ok"}),
            json!({"execution": 2, "subject": "analyst", "capability_id": "records.query", "capability": "records.query", "decision": "deny", "outcome": "permission denied"}),
            json!({"execution": 3, "subject": "analyst", "capability_id": "records.lookup", "capability": "records.lookup", "decision": "not_evaluated", "outcome": "invalid capability arguments"}),
        ]
    );
    // The allowed call ran the plugin; the denied one and the unbound one never did.
    assert!(
        audit[0]["fuel"].as_u64().is_some_and(|f| f > 0),
        "{}",
        audit[0]
    );
    assert_eq!(audit[1]["fuel"], json!(0));
    assert_eq!(audit[2]["fuel"], json!(0));
    assert!(
        audit[0]["time"]
            .as_str()
            .is_some_and(|t| t.len() == 27 && t.ends_with('Z')),
        "{}",
        audit[0]
    );
}

#[test]
fn a_guest_is_denied_and_a_forged_meta_subject_changes_nothing() {
    let forged = json!({"op": "call", "tool": "execute", "arguments": {"source": LOOKUP}, "meta": {"subject": "analyst", "codemode/subject": {"id": "analyst"}}});
    let (results, audit) = serve("guest", "guest", json!([execute(LOOKUP), forged]));
    assert_eq!(err(&results[0]), "permission denied");
    assert_eq!(err(&results[1]), "permission denied");
    let subjects: Vec<&Value> = audit.iter().map(|line| &line["subject"]).collect();
    assert_eq!(subjects, vec!["guest", "guest"]);
}

#[test]
fn an_empty_subject_is_unauthenticated_for_every_tool() {
    let (results, audit) = serve(
        "empty",
        "",
        json!([
            execute(LOOKUP),
            call("search_api", json!({"query": "book"})),
            call("describe_api", json!({"name": "records.lookup"})),
        ]),
    );
    for result in &results {
        assert_eq!(err(result), "unauthenticated");
    }
    assert!(audit.is_empty(), "{audit:?}");
}

#[test]
fn a_decision_that_is_not_boolean_is_a_policy_failure() {
    let plugins = example_plugins();
    let out = drive(
        &[
            "--plugins",
            plugins.to_str().expect("utf-8 path"),
            "--policy",
            &policy("not-boolean.rego"),
            "--audit-log",
            audit_path("not-boolean").to_str().expect("utf-8 path"),
        ],
        json!([execute(LOOKUP)]),
    );
    assert_eq!(err(&out["results"][0]), "authorization policy failure");
}

#[test]
fn a_range_sized_by_an_argument_fails_closed_and_the_server_lives_on() {
    let plugins = example_plugins();
    let query = |limit: i64| {
        execute(&format!(
            "def main():\n    return records.query(filter={{}}, tags=[], limit={limit})[\"total\"] >= 0"
        ))
    };
    let out = drive(
        &[
            "--plugins",
            plugins.to_str().expect("utf-8 path"),
            "--policy",
            &policy("range.rego"),
        ],
        json!([query(2_000_000_000), query(5)]),
    );
    let results = out["results"].as_array().expect("results");
    assert_eq!(err(&results[0]), "authorization policy failure");
    // The same server answers the next call: it was not aborted.
    assert_eq!(ok(&results[1]), &json!({"result": true}));
}

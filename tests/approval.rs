//! A human approves sensitive calls (issue 37): a policy that decides
//! `{"ask": "<question>"}` for the double upstream's destructive `note` tool
//! (its annotations say so), and the official Python SDK client answering the
//! elicitation over stdio. Each test checks the exact texts and whether the
//! note was written: a declined call's upstream never ran.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::{HttpServer, python, root, run_driver, with_cache};

/// Read-only calls run, destructive ones are asked about, the rest denied.
const POLICY: &str = r#"package codemode.authz

default allow := false

allow if input.capability.annotations.readOnlyHint

allow := {"ask": sprintf("May %s write a note?", [input.subject.id])} if {
    input.capability.annotations.destructiveHint
}
"#;

/// What the human reads for `note(text="a")` of the subject `local`.
const QUESTION: &str =
    "May local write a note?\n\nCapability: double.note\nArguments: {\"text\":\"a\"}";

/// A test's folder: the config (the double upstream writing to `double.log`),
/// the policy and the audit log.
struct Setup {
    dir: PathBuf,
}

impl Setup {
    fn new(label: &str, settings: &str) -> Self {
        let dir = root().join("target/e2e-approval").join(label);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("plugins")).expect("create the folder");
        std::fs::write(dir.join("policy.rego"), POLICY).expect("write the policy");
        let config = format!(
            "plugins = \"plugins\"\n{settings}\n\n[[upstream]]\nname = \"double\"\ncommand = [{:?}, {:?}]\nenv = {{ DOUBLE_LOG = {:?} }}\ntimeout = \"20s\"\n",
            python().display().to_string(),
            root()
                .join("tests/upstreams/double.py")
                .display()
                .to_string(),
            dir.join("double.log").display().to_string(),
        );
        std::fs::write(dir.join("codemode.toml"), config).expect("write the config");
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args = vec![
            "--config".to_owned(),
            self.path("codemode.toml"),
            "--policy".to_owned(),
            self.path("policy.rego"),
            "--audit-log".to_owned(),
            self.path("audit.jsonl"),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args
    }

    /// Runs `source` over stdio with the Python client, answering the
    /// elicitations with `answers` (none: the client declares no elicitation).
    fn execute(&self, extra: &[&str], answers: Option<Value>, source: &str) -> Value {
        let args = self.args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut script = json!({
            "command": crate::support::host_bin(),
            "args": with_cache(&args),
            "mode": "legacy",
            "steps": [{"op": "call", "tool": "execute", "arguments": {"source": source}}],
        });
        if let Some(answers) = answers {
            script["elicitation"] = answers;
        }
        run_driver(&script)
    }

    /// The notes the upstream wrote.
    fn notes(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("double.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.strip_prefix("note "))
            .map(str::to_owned)
            .collect()
    }

    /// The audit lines of `double.note`: their decision and approval.
    fn asked(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("JSON"))
            .filter(|line| line["capability"] == "double.note")
            .map(|line| {
                json!({
                    "decision": line["decision"],
                    "approval": line["approval"],
                    "outcome": line["outcome"],
                })
            })
            .collect()
    }
}

fn note(text: &str) -> String {
    format!("def main():\n    return double.note(text={text:?})")
}

fn accept(approve: bool, for_execution: bool) -> Value {
    json!({"action": "accept", "content": {
        "approve": approve,
        "approve_for_this_execution": for_execution,
    }})
}

/// The answer to a call that was not allowed.
fn assert_denied(out: &Value, line: u64, column: u64) {
    let result = &out["results"][0];
    assert_eq!(result["is_error"], true, "{out}");
    assert_eq!(result["text"], json!(["permission denied"]), "{out}");
    assert_eq!(
        result["meta"]["codemode/error"],
        json!({"capability": "double.note", "line": line, "column": column}),
        "{out}"
    );
}

#[test]
fn an_approved_call_runs_once_the_human_says_yes() {
    let setup = Setup::new("approved", "");
    let out = setup.execute(&[], Some(json!([accept(true, false)])), &note("a"));
    let result = &out["results"][0];
    assert_eq!(result["is_error"], false, "{out}");
    assert_eq!(
        result["structured"]["result"],
        json!({"result": "noted a"}),
        "{out}"
    );
    // What the human saw: the policy's question, the call, a yes/no form (rmcp
    // gives every request it sends a progress token of its own).
    let mut elicitations = out["elicitations"].clone();
    if let Some(meta) = elicitations[0].as_object_mut() {
        assert_eq!(meta.remove("_meta"), Some(json!({"progressToken": 0})));
    }
    assert_eq!(
        elicitations,
        json!([{
            "mode": "form",
            "message": QUESTION,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "approve": {"type": "boolean", "title": "Approve this call"},
                    "approve_for_this_execution": {
                        "type": "boolean",
                        "title": "Approve every call of this capability until the program ends",
                        "default": false
                    }
                },
                "required": ["approve"]
            }
        }])
    );
    assert_eq!(setup.notes(), ["a"]);
    assert_eq!(
        setup.asked(),
        [json!({
            "decision": "asked",
            "approval": {"outcome": "approved", "subject": "local"},
            "outcome": "ok"
        })]
    );
}

#[test]
fn a_declined_call_never_reaches_the_upstream() {
    let setup = Setup::new("declined", "");
    for (answer, label) in [
        (json!({"action": "decline"}), "declined"),
        (json!({"action": "cancel"}), "declined"),
        (accept(false, false), "declined"),
    ] {
        let out = setup.execute(&[], Some(json!([answer])), &note("a"));
        assert_denied(&out, 2, 12);
        assert_eq!(setup.notes(), Vec::<String>::new(), "{label}");
    }
    assert_eq!(
        setup.asked(),
        vec![
            json!({
                "decision": "asked",
                "approval": {"outcome": "declined", "subject": "local"},
                "outcome": "permission denied"
            });
            3
        ]
    );
}

#[test]
fn an_unanswered_question_times_out_and_waiting_is_not_execution_time() {
    // Answered after 1 s: past --approval-timeout, the call is denied.
    let setup = Setup::new("timeout", "");
    let late = json!([{"wait": 1.0}, accept(true, false)]);
    let out = setup.execute(&["--approval-timeout", "300ms"], Some(late), &note("a"));
    assert_denied(&out, 2, 12);
    assert_eq!(setup.notes(), Vec::<String>::new());
    assert_eq!(
        setup.asked(),
        [json!({
            "decision": "asked",
            "approval": {"outcome": "timed out", "subject": "local"},
            "outcome": "permission denied"
        })]
    );
    // Answered after 2.5 s, within --approval-timeout: an execution with 2 s
    // of time runs on, the wait not counted.
    let patient = Setup::new("patient", "max-execution-time = \"2s\"");
    let slow = json!([{"wait": 2.5}, accept(true, false)]);
    let out = patient.execute(&["--approval-timeout", "5s"], Some(slow), &note("b"));
    assert_eq!(out["results"][0]["is_error"], false, "{out}");
    assert_eq!(patient.notes(), ["b"]);
}

#[test]
fn a_client_that_cannot_be_asked_is_denied() {
    let setup = Setup::new("unasked", "");
    let out = setup.execute(&[], None, &note("a"));
    assert_denied(&out, 2, 12);
    assert_eq!(setup.notes(), Vec::<String>::new());
    assert_eq!(
        setup.asked(),
        [json!({
            "decision": "asked",
            "approval": {"outcome": "not asked", "subject": "local"},
            "outcome": "permission denied"
        })]
    );
    // A read-only tool runs without asking; one declaring neither is denied.
    let out = setup.execute(
        &[],
        None,
        "def main():\n    return double.echo(text=\"hi\")",
    );
    assert_eq!(out["results"][0]["is_error"], false, "{out}");
    let out = setup.execute(&[], None, "def main():\n    return double.env(name=\"X\")");
    assert_eq!(out["results"][0]["text"], json!(["permission denied"]));
}

#[test]
fn approving_for_the_execution_asks_once_in_a_loop_of_fifty() {
    let setup = Setup::new("loop", "");
    let source = "def main():\n    for i in range(50):\n        double.note(text=str(i))\n    return \"done\"";
    let out = setup.execute(&[], Some(json!([accept(true, true)])), source);
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": "done"}),
        "{out}"
    );
    assert_eq!(out["elicitations"].as_array().map(Vec::len), Some(1));
    let expected: Vec<String> = (0..50).map(|i| i.to_string()).collect();
    assert_eq!(setup.notes(), expected);
    let asked = setup.asked();
    assert_eq!(asked.len(), 50);
    assert_eq!(
        asked[0]["approval"]["outcome"],
        "approved for this execution"
    );
    assert!(
        asked[1..]
            .iter()
            .all(|line| line["approval"]["outcome"] == "approved earlier"),
        "{asked:?}"
    );
    // Approved once, without "for this execution": the next call asks again,
    // and a decline there stops the program.
    let again = Setup::new("loop-again", "");
    let source =
        "def main():\n    double.note(text=\"x\")\n    double.note(text=\"y\")\n    return 1";
    let answers = json!([accept(true, false), {"action": "decline"}]);
    let out = again.execute(&[], Some(answers), source);
    assert_denied(&out, 3, 5);
    assert_eq!(out["elicitations"].as_array().map(Vec::len), Some(2));
    assert_eq!(again.notes(), ["x"]);
}

#[test]
fn over_http_nobody_is_asked_and_the_log_says_why() {
    let setup = Setup::new("http", "");
    let args = setup.args(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = HttpServer::start(&args);
    let out = crate::support::call_tool(server.port, "execute", json!({"source": note("a")}));
    assert_eq!(out["content"][0]["text"], "permission denied", "{out}");
    crate::support::wait_for_log(
        &server,
        "call denied: the policy asks a human, who cannot be asked subject=local capability=double.note reason=asking over Streamable HTTP is not supported yet (stdio only)",
        1,
    );
    assert_eq!(setup.notes(), Vec::<String>::new());
    let metrics = crate::support::raw_request(server.port, "GET", "/metrics", &[], "").body;
    assert!(
        metrics.contains("codemode_approvals_total{outcome=\"not asked\"} 1\n"),
        "{metrics}"
    );
}

/// The README's example policy: the `rego` block after "**Asking a human.**".
fn readme_policy() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("read the README");
    let section = readme
        .find("**Asking a human.**")
        .map(|at| &readme[at..])
        .expect("the README's section on asking");
    let start = section.find("```rego\n").expect("a rego block") + "```rego\n".len();
    let end = section[start..].find("```").expect("the block's end");
    section[start..start + end].to_owned()
}

/// The subject of the last commit of `repo`.
fn last_commit(repo: &std::path::Path) -> String {
    let out = std::process::Command::new("git")
        .args(["log", "-1", "--format=%s"])
        .current_dir(repo)
        .output()
        .expect("run git log");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn the_readme_policy_asks_before_a_git_commit_through_the_gateway() {
    let repo = crate::upstream::git_repository("approval");
    std::fs::write(repo.join("todo.txt"), "ship it\n").expect("write a file");
    let added = std::process::Command::new("git")
        .args(["add", "todo.txt"])
        .current_dir(&repo)
        .status()
        .is_ok_and(|s| s.success());
    assert!(added, "git add failed");
    let first = last_commit(&repo);
    let dir = root().join("target/e2e-approval/git");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plugins")).expect("create the folder");
    std::fs::write(dir.join("ask.rego"), readme_policy()).expect("write the policy");
    let git = crate::upstream::upstream_bin().join("mcp-server-git");
    std::fs::write(
        dir.join("codemode.toml"),
        format!(
            "plugins = \"plugins\"\n\n[[upstream]]\nname = \"git\"\ncommand = [{:?}, \"--repository\", {:?}]\n",
            git.display().to_string(),
            repo.display().to_string()
        ),
    )
    .expect("write the config");
    let repo_path = repo.display().to_string();
    let source = format!(
        "def main():\n    status = git.git_status(repo_path={repo_path:?})\n    git.git_commit(repo_path={repo_path:?}, message=\"Approved by a human\")\n    return \"todo.txt\" in status[\"text\"]"
    );
    let run = |answers: Value| {
        let args = [
            "--config".to_owned(),
            dir.join("codemode.toml").display().to_string(),
            "--policy".to_owned(),
            dir.join("ask.rego").display().to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_driver(&json!({
            "command": crate::support::host_bin(),
            "args": with_cache(&args),
            "mode": "legacy",
            "elicitation": answers,
            "steps": [{"op": "call", "tool": "execute", "arguments": {"source": source}}],
        }))
    };
    let question = format!(
        "local wants to run git.git_commit, which changes things.\n\nCapability: git.git_commit\nArguments: {{\"message\":\"Approved by a human\",\"repo_path\":{repo_path:?}}}"
    );
    // Declined: the status ran without asking, the commit never did.
    let out = run(json!([{"action": "decline"}]));
    assert_eq!(
        out["results"][0]["text"],
        json!(["permission denied"]),
        "{out}"
    );
    assert_eq!(out["elicitations"][0]["message"], question.as_str());
    assert_eq!(out["elicitations"].as_array().map(Vec::len), Some(1));
    assert_eq!(last_commit(&repo), first);
    // Approved: committed.
    let out = run(json!([accept(true, false)]));
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": true}),
        "{out}"
    );
    assert_eq!(out["elicitations"][0]["message"], question.as_str());
    assert_eq!(last_commit(&repo), "Approved by a human");
}

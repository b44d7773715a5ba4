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

    /// A tokens file in the folder giving each `(subject, token)`; its path.
    fn tokens(&self, subjects: &[(&str, &str)]) -> String {
        let text: String = subjects
            .iter()
            .map(|(subject, token)| {
                format!("{subject} {}\n", codemode_server::authz::token_hash(token))
            })
            .collect();
        std::fs::write(self.dir.join("tokens"), text).expect("write the tokens");
        self.path("tokens")
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// An HTTP server of this setup asking with `--approval-timeout`
    /// `timeout`, the callers in `tokens` (a file [`Setup::tokens`] wrote),
    /// sealing with the setup's approval key (the same for every server it
    /// starts, as replicas share it) and keeping tasks in `store` (Redis) when
    /// given.
    fn replica(&self, timeout: &str, tokens: &str, store: Option<&str>) -> HttpServer {
        self.replica_with(timeout, tokens, store.map(|url| ["--task-store", url]))
    }

    /// [`Setup::replica`] with `store`'s flag and value (`--task-store` or
    /// `--store`).
    fn replica_with(&self, timeout: &str, tokens: &str, store: Option<[&str; 2]>) -> HttpServer {
        let key = self.dir.join("approval.key");
        if !key.is_file() {
            std::fs::write(&key, format!("{}\n", "ab12".repeat(16))).expect("write the key");
        }
        let mut args = self.args(&["--approval-timeout", timeout]);
        args.extend([
            "--approval-key".to_owned(),
            key.display().to_string(),
            "--tokens".to_owned(),
            tokens.to_owned(),
        ]);
        if let Some([flag, value]) = store {
            args.extend([flag.to_owned(), value.to_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        HttpServer::start(&args)
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
        self.execute_in("legacy", extra, answers, source)
    }

    /// [`Setup::execute`] with the client in protocol `mode`.
    fn execute_in(
        &self,
        mode: &str,
        extra: &[&str],
        answers: Option<Value>,
        source: &str,
    ) -> Value {
        let steps = json!([{"op": "call", "tool": "execute", "arguments": {"source": source}}]);
        self.steps(mode, extra, answers, steps)
    }

    /// Runs the driver's `steps` in protocol `mode`, answering elicitations with
    /// `answers`.
    fn steps(&self, mode: &str, extra: &[&str], answers: Option<Value>, steps: Value) -> Value {
        let args = self.args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut script = json!({
            "command": crate::support::host_bin(),
            "args": with_cache(&args),
            "mode": mode,
            "steps": steps,
        });
        if let Some(answers) = answers {
            script["elicitation"] = answers;
        }
        run_driver(&script)
    }

    /// The notes the upstream wrote.
    fn notes(&self) -> Vec<String> {
        self.logged("note ")
    }

    /// The upstream's log lines starting with `prefix`, without it.
    fn logged(&self, prefix: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("double.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.strip_prefix(prefix))
            .map(str::to_owned)
            .collect()
    }

    /// The audit lines so far.
    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("JSON"))
            .collect()
    }

    /// Every audit line as `capability decision`, the decision being the
    /// approval's outcome when one was asked.
    fn decisions(&self) -> Vec<String> {
        self.audit()
            .into_iter()
            .map(|line| {
                let decision = match &line["approval"] {
                    Value::Null => &line["decision"],
                    approval => &approval["outcome"],
                };
                format!(
                    "{} {}",
                    line["capability"].as_str().unwrap_or_default(),
                    decision.as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    /// The audit lines of `double.note`: their decision and approval.
    fn asked(&self) -> Vec<Value> {
        self.audit()
            .into_iter()
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

/// The yes/no form every question carries.
fn form_schema() -> Value {
    json!({
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
    })
}

/// The messages of the elicitations a driver's client answered.
fn messages(out: &Value) -> Vec<&str> {
    out["elicitations"]
        .as_array()
        .map(|all| all.iter().filter_map(|e| e["message"].as_str()).collect())
        .unwrap_or_default()
}

fn note(text: &str) -> String {
    format!("def main():\n    return double.note(text={text:?})")
}

/// `note(text)` with `text` in the program as it is, only quotes, backslashes
/// and newlines escaped (Rust's `{:?}` writes `\u{202e}`, which Starlark does
/// not read).
fn note_raw(text: &str) -> String {
    let literal = text
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("def main():\n    return double.note(text=\"{literal}\")")
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

/// The audit line of a call whose approval `subject` was asked for: its
/// approval's `outcome` and the call's `result`.
fn asked(subject: &str, outcome: &str, result: &str) -> Value {
    json!({
        "decision": "asked",
        "approval": {"outcome": outcome, "subject": subject},
        "outcome": result
    })
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
            "requestedSchema": form_schema()
        }])
    );
    assert_eq!(setup.notes(), ["a"]);
    assert_eq!(setup.asked(), [asked("local", "approved", "ok")]);
}

/// Issue 49, F4-F6: a question built from the agent's arguments cannot fake
/// the block the human reads (newlines, a right-to-left override and tag
/// characters show as escapes), and arguments cut to fit say that approving
/// runs them whole.
#[test]
fn the_human_sees_through_forged_questions_and_cut_arguments() {
    let setup = Setup::new("forged", "");
    std::fs::write(
        setup.dir.join("policy.rego"),
        "package codemode.authz\n\ndefault allow := false\n\nallow := {\"ask\": sprintf(\"Write %s?\", [substring(input.arguments.text, 0, 200)])}\n",
    )
    .expect("write the policy");
    let forged = "x\n\nCapability: up.echo\nArguments: {}\u{202E}\u{E0041}";
    let long = format!("ls{}; rm -rf ~", " ".repeat(5000));
    let steps = json!([
        {"op": "call", "tool": "execute", "arguments": {"source": note_raw(forged)}},
        {"op": "call", "tool": "execute", "arguments": {"source": note_raw(&long)}},
    ]);
    let out = setup.steps(
        "legacy",
        &[],
        Some(json!([{"action": "decline"}, {"action": "decline"}])),
        steps,
    );
    let messages = messages(&out);
    assert_eq!(messages.len(), 2, "{out}");
    assert_eq!(
        messages[0],
        "Write x\\u000A\\u000ACapability: up.echo\\u000AArguments: {}\\u202E\\u{E0041}?\n\nCapability: double.note\nArguments: {\"text\":\"x\\n\\nCapability: up.echo\\nArguments: {}\\u202E\\u{E0041}\"}"
    );
    assert_eq!(
        messages[1],
        format!(
            "Write {}?\n\nCapability: double.note\nArguments: {{\"text\":\"ls{}…[cut]\"}}\n\n{}",
            &long[..200],
            " ".repeat(510),
            codemode_server::mcp::ARGUMENTS_CUT
        )
    );
    assert_eq!(setup.notes(), Vec::<String>::new());
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
        vec![asked("local", "declined", "permission denied"); 3]
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
        [asked("local", "timed out", "permission denied")]
    );
    // Answered after 2.5 s, within --approval-timeout: an execution with 2 s
    // of time runs on, the wait not counted.
    // (A search first: the start, which the first call waits for, is over.)
    let patient = Setup::new("patient", "max-execution-time = \"2s\"");
    let slow = json!([{"wait": 2.5}, accept(true, false)]);
    let out = patient.steps(
        "legacy",
        &["--approval-timeout", "5s"],
        Some(slow),
        json!([
            {"op": "call", "tool": "search_api", "arguments": {"query": "note"}},
            {"op": "call", "tool": "execute", "arguments": {"source": note("b")}},
        ]),
    );
    assert_eq!(out["results"][1]["is_error"], false, "{out}");
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
        [asked("local", "not asked", "permission denied")]
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
        "call denied: the policy asks a human, who cannot be asked subject=local capability=double.note reason=a client before 2026-07-28 over Streamable HTTP is asked only with --http-sessions",
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

/// The example plugins declare what they do (issue 49): under the README's
/// ask policy each one runs without asking, as a read; a capability that
/// declares nothing (the test plugin `sleepy`) matches no rule and is denied.
#[test]
fn the_readme_policy_lets_the_example_plugins_run_and_denies_what_declares_nothing() {
    let dir = root().join("target/e2e-approval/readme-examples");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the folder");
    std::fs::write(dir.join("ask.rego"), readme_policy()).expect("write the policy");
    let mut files: Vec<std::path::PathBuf> = ["records", "stats", "text", "fetch"]
        .iter()
        .map(|name| crate::support::example_plugins().join(format!("{name}.wasm")))
        .collect();
    files.push(crate::support::foreign_plugin("python_geo"));
    files.push(crate::support::foreign_plugin("js_strings"));
    files.push(crate::support::test_plugin("sleepy"));
    let plugins = crate::support::plugin_folder("approval-readme-examples", &files);
    let policy = dir.join("ask.rego");
    let args = [
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
        "--policy",
        policy.to_str().expect("utf-8 path"),
    ];
    let programs = [
        "return records.lookup(key=\"bk-0001\")[\"key\"]",
        "return stats.summary(values=[1.0, 3.0])[\"mean\"]",
        "return text.slugify(text=\"A B\")[\"slug\"]",
        "return geo.distance(a={\"lat\": 0.0, \"lon\": 0.0}, b={\"lat\": 0.0, \"lon\": 0.0})[\"km\"]",
        "return strings.slugify(text=\"A B\")[\"slug\"]",
        // No sidecar, no host: fetch's own failure, not the policy's.
        "return web.get(url=\"https://example.invalid/\")",
        "return sleepy.nap(ms=1)",
    ];
    let steps: Vec<Value> = programs
        .iter()
        .map(|body| {
            crate::stdio::call(
                "execute",
                json!({"source": format!("def main():\n    {body}")}),
            )
        })
        .collect();
    let out = crate::support::drive(&args, Value::Array(steps));
    let texts: Vec<Value> = out["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|result| {
            if result["is_error"] == true {
                json!(crate::stdio::err(result))
            } else {
                crate::stdio::ok(result)["result"].clone()
            }
        })
        .collect();
    assert_eq!(
        texts,
        [
            json!("bk-0001"),
            json!(2.0),
            json!("a-b"),
            json!(0.0),
            json!("a-b"),
            json!("capability failed: outbound host https://example.invalid:443 is not allowed"),
            json!("permission denied"),
        ],
        "{out}"
    );
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

/// A 2026-07-28 client is asked with an input_required result; the Python SDK
/// answers through its elicitation callback and retries; the program runs
/// again, its earlier calls replayed from the record, never made twice.
#[test]
fn a_2026_client_answers_an_input_required_and_nothing_runs_twice() {
    let setup = Setup::new("mrtr", "");
    let source = "def main():\n    n = double.count()\n    double.note(text=\"x\")\n    double.note(text=\"y\")\n    return n";
    let out = setup.execute_in(
        "2026-07-28",
        &[],
        Some(json!([accept(true, false)])),
        source,
    );
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": {"result": 1}}),
        "{out}"
    );
    // Asked once per note: two rounds, each replaying what ran before.
    let messages = messages(&out);
    assert_eq!(
        messages,
        [
            "May local write a note?\n\nCapability: double.note\nArguments: {\"text\":\"x\"}",
            "May local write a note?\n\nCapability: double.note\nArguments: {\"text\":\"y\"}",
        ]
    );
    assert_eq!(setup.logged("count "), ["1"]);
    assert_eq!(setup.notes(), ["x", "y"]);
    let decisions = setup.decisions();
    assert_eq!(
        decisions,
        [
            "double.count allow",
            "double.note awaiting answer",
            "double.count replayed",
            "double.note approved",
            "double.note awaiting answer",
            "double.count replayed",
            "double.note replayed",
            "double.note approved",
        ]
    );
    // Waiting for the answer is not a denial: its line says so.
    let awaiting: Vec<Value> = setup
        .asked()
        .into_iter()
        .filter(|line| line["approval"]["outcome"] == "awaiting answer")
        .collect();
    assert_eq!(
        awaiting,
        vec![asked("local", "awaiting answer", "input required"); 2]
    );
    // Declined: the program ends at the call, which never ran.
    let declined = Setup::new("mrtr-declined", "");
    let out = declined.execute_in(
        "2026-07-28",
        &[],
        Some(json!([{"action": "decline"}])),
        &note("a"),
    );
    assert_denied(&out, 2, 12);
    assert_eq!(declined.notes(), Vec::<String>::new());
    // Approved for the execution: one round for fifty notes.
    let looped = Setup::new("mrtr-loop", "");
    let source = "def main():\n    for i in range(50):\n        double.note(text=str(i))\n    return \"done\"";
    let out = looped.execute_in("2026-07-28", &[], Some(json!([accept(true, true)])), source);
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": "done"}),
        "{out}"
    );
    assert_eq!(out["elicitations"].as_array().map(Vec::len), Some(1));
    assert_eq!(looped.notes().len(), 50);
}

/// The state's writes under approval by replay: each round replays the calls
/// that ran before from its record, so a kept value is written once, when
/// approved, and never again (issue 53).
#[test]
fn a_state_write_approved_by_replay_is_made_once() {
    let setup = Setup::new("state-replay", "store = \"store.redb\"");
    let source = "def main():\n    n = (state.get(key=\"n\")[\"value\"] or 0) + 1\n    put = state.put(key=\"n\", value=n)\n    double.note(text=\"x\")\n    return [put[\"replaced\"], state.get(key=\"n\")[\"value\"]]";
    let out = setup.execute_in(
        "2026-07-28",
        &[],
        Some(json!([accept(true, false)])),
        source,
    );
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": [false, 1]}),
        "{out}"
    );
    assert_eq!(
        setup.decisions(),
        [
            "state.get allow",
            "state.put awaiting answer",
            "state.get replayed",
            "state.put approved",
            "double.note awaiting answer",
            "state.get replayed",
            "state.put replayed",
            "double.note approved",
            "state.get allow",
        ]
    );
    assert_eq!(setup.notes(), ["x"]);
    // A later execution reads what the approved round wrote, once.
    let out = setup.execute_in(
        "2026-07-28",
        &[],
        None,
        "def main():\n    return state.get(key=\"n\")",
    );
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": {"found": true, "value": 1}}),
        "{out}"
    );
}

/// A call under a quota on its capability's calls is counted when it runs:
/// a round that replays it from the record counts it no more (issue 53).
#[test]
fn a_call_under_a_capability_quota_is_counted_once_across_an_approvals_replay() {
    crate::quota::early_in_a_minute_and_day(std::time::Duration::ZERO);
    let setup = Setup::new(
        "quota-replay",
        "store = \"store.redb\"\n\n[[quota]]\ncapability = \"state.get\"\ncalls-per-day = 2\n",
    );
    let source = "def main():\n    state.get(key=\"n\")\n    double.note(text=\"x\")\n    return state.get(key=\"n\")[\"found\"]";
    let out = setup.execute_in(
        "2026-07-28",
        &[],
        Some(json!([accept(true, false)])),
        source,
    );
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": false}),
        "{out}"
    );
    assert_eq!(
        setup.decisions(),
        [
            "state.get allow",
            "double.note awaiting answer",
            "state.get replayed",
            "double.note approved",
            "state.get allow",
        ]
    );
    // The day's two ran: a third is refused.
    let out = setup.execute_in(
        "2026-07-28",
        &[],
        None,
        "def main():\n    return state.get(key=\"n\")",
    );
    let step = &out["results"][0];
    assert_eq!(step["text"][0], "resource limit exceeded", "{out}");
    assert_eq!(
        step["meta"]["codemode/stats"]["quota"]["name"], "calls-per-day",
        "{out}"
    );
}

/// Nobody is asked to approve a call that its capability's quota would
/// refuse: the program stops there, the quota named, and nothing ran.
#[test]
fn a_call_its_quota_would_refuse_is_not_put_to_a_human() {
    crate::quota::early_in_a_minute_and_day(std::time::Duration::ZERO);
    let setup = Setup::new(
        "quota-ask",
        "store = \"store.redb\"\n\n[[quota]]\ncapability = \"double.note\"\ncalls-per-day = 1\n",
    );
    let first = setup.execute_in(
        "2026-07-28",
        &[],
        Some(json!([accept(true, false)])),
        &note("x"),
    );
    assert_eq!(
        first["results"][0]["structured"],
        json!({"result": {"result": "noted x"}}),
        "{first}"
    );
    let second = setup.execute_in(
        "2026-07-28",
        &[],
        Some(json!([accept(true, false)])),
        &note("y"),
    );
    let step = &second["results"][0];
    assert_eq!(step["text"][0], "resource limit exceeded", "{second}");
    let quota = &step["meta"]["codemode/stats"]["quota"];
    assert_eq!(quota["name"], "calls-per-day", "{second}");
    assert_eq!(quota["capability"], "double.note", "{second}");
    assert_eq!(
        second["elicitations"].as_array().map(Vec::len),
        Some(0),
        "{second}"
    );
    assert_eq!(setup.notes(), ["x"]);
    assert_eq!(
        setup.decisions(),
        [
            "double.note awaiting answer",
            "double.note approved",
            "double.note asked",
        ]
    );
}

/// A plugin's instance that waited while a human took longer than the
/// execution's time left keeps running: the deadline its sandbox checks moved
/// with the wait.
#[test]
fn a_plugin_called_again_after_a_long_approval_keeps_its_time() {
    let setup = Setup::new("plugin", "max-execution-time = \"2s\"");
    std::fs::copy(
        crate::support::test_plugin("sleepy"),
        setup.dir.join("plugins/sleepy.wasm"),
    )
    .expect("copy the plugin");
    std::fs::write(
        setup.dir.join("policy.rego"),
        "package codemode.authz\n\ndefault allow := false\n\nallow if input.arguments.ms != 2\n\nallow := {\"ask\": \"Nap for 2 ms?\"} if input.arguments.ms == 2\n",
    )
    .expect("write the policy");
    let out = setup.steps(
        "legacy",
        &["--approval-timeout", "5s"],
        Some(json!([{"wait": 2.5}, accept(true, false)])),
        json!([
            {"op": "call", "tool": "search_api", "arguments": {"query": "nap"}},
            {"op": "call", "tool": "execute", "arguments": {"source":
                "def main():\n    sleepy.nap(ms=1)\n    sleepy.nap(ms=2)\n    return sleepy.nap(ms=3)"}},
        ]),
    );
    assert_eq!(
        out["results"][1]["structured"],
        json!({"result": {"ms": 3}}),
        "{out}"
    );
    assert_eq!(
        out["elicitations"][0]["message"],
        "Nap for 2 ms?\n\nCapability: sleepy.nap\nArguments: {\"ms\":2}"
    );
}

/// One 2026-07-28 `tools/call execute` of `source` over HTTP as the subject of
/// `token`, declaring elicitation; a retry carries `retry` (`inputResponses`
/// and `requestState`). Returns the JSON-RPC answer.
fn call_2026(server: &HttpServer, token: &str, source: &str, retry: Option<Value>) -> Value {
    let mut params = json!({
        "name": "execute",
        "arguments": {"source": source},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "approval-test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    });
    if let Some(Value::Object(retry)) = retry {
        for (key, value) in retry {
            params[key] = value;
        }
    }
    post_2026(server, token, "tools/call", "execute", params)
}

/// One 2026-07-28 request `method` with `params` (their `_meta` included) over
/// HTTP as the subject of `token`; `name` is its `Mcp-Name` header. Returns
/// the JSON-RPC answer.
fn post_2026(server: &HttpServer, token: &str, method: &str, name: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let bearer = format!("Bearer {token}");
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
        ("Mcp-Name", name),
        ("Authorization", bearer.as_str()),
    ];
    let answer =
        crate::support::raw_request(server.port, "POST", "/mcp", &headers, &body.to_string());
    serde_json::from_str(&answer.body)
        .unwrap_or_else(|e| panic!("{e}: {} {}", answer.status, answer.body))
}

/// Issue 49, F2: with tasks in memory (`--store memory`), a state's single
/// use is remembered by the process that asked alone; a restart (the key file
/// kept) forgot it, and the same answer ran the call again. A state now opens
/// only in the process that sealed it: after a restart the spent answer runs
/// nothing, and so does one not yet given (the human is asked again by a new
/// execute).
#[test]
fn with_tasks_in_memory_a_restart_never_runs_a_spent_approval_again() {
    let setup = Setup::new("restart", "");
    let tokens = setup.tokens(&[("ada", "ada-secret")]);
    let start = || setup.replica_with("10m", &tokens, Some(["--store", "memory"]));
    let answer = |state: &str| {
        json!({
            "requestState": state,
            "inputResponses": {"approval": {"action": "accept", "content": {"approve": true}}},
        })
    };
    let state_of = |asked: &Value| {
        asked["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("a requestState in {asked}"))
            .to_owned()
    };
    let first = start();
    let spent = state_of(&call_2026(&first, "ada-secret", &note("h"), None));
    let waiting = state_of(&call_2026(&first, "ada-secret", &note("w"), None));
    let done = call_2026(&first, "ada-secret", &note("h"), Some(answer(&spent)));
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"result": {"result": "noted h"}}),
        "{done}"
    );
    assert_eq!(setup.notes(), ["h"]);
    drop(first);
    let again = start();
    for (state, program) in [(&spent, note("h")), (&waiting, note("w"))] {
        let out = call_2026(&again, "ada-secret", &program, Some(answer(state)));
        assert_eq!(out["result"]["isError"], true, "{out}");
        assert_eq!(out["result"]["content"][0]["text"], "permission denied");
    }
    crate::support::wait_for_log(
        &again,
        &format!("reason={}", codemode_server::mcp::ASKED_ELSEWHERE),
        2,
    );
    assert_eq!(setup.notes(), ["h"]);
    // Asked again by this process, answered here: it runs.
    let asked = state_of(&call_2026(&again, "ada-secret", &note("w"), None));
    let done = call_2026(&again, "ada-secret", &note("w"), Some(answer(&asked)));
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"result": {"result": "noted w"}}),
        "{done}"
    );
    assert_eq!(setup.notes(), ["h", "w"]);
}

/// With the embedded file store (`--store`'s default) the single use of a
/// state is kept in the file: after a SIGKILL and restart on the same file the
/// spent answer is refused as answered already, and the one not yet given
/// runs.
#[test]
fn in_the_file_store_an_approvals_single_use_outlives_a_restart() {
    let setup = Setup::new("restart-file", "");
    let tokens = setup.tokens(&[("ada", "ada-secret")]);
    let store = setup.path("store.redb");
    let start = || setup.replica_with("10m", &tokens, Some(["--store", &store]));
    let answer = |state: &str| {
        json!({
            "requestState": state,
            "inputResponses": {"approval": {"action": "accept", "content": {"approve": true}}},
        })
    };
    let state_of = |asked: &Value| {
        asked["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("a requestState in {asked}"))
            .to_owned()
    };
    let first = start();
    let spent = state_of(&call_2026(&first, "ada-secret", &note("h"), None));
    let waiting = state_of(&call_2026(&first, "ada-secret", &note("w"), None));
    let done = call_2026(&first, "ada-secret", &note("h"), Some(answer(&spent)));
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"result": {"result": "noted h"}}),
        "{done}"
    );
    drop(first);
    let again = start();
    let out = call_2026(&again, "ada-secret", &note("h"), Some(answer(&spent)));
    assert_eq!(
        out["result"]["content"][0]["text"], "permission denied",
        "{out}"
    );
    crate::support::wait_for_log(
        &again,
        &format!("reason={}", codemode_server::mcp::USED_ALREADY),
        1,
    );
    let done = call_2026(&again, "ada-secret", &note("w"), Some(answer(&waiting)));
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"result": {"result": "noted w"}}),
        "{done}"
    );
    assert_eq!(setup.notes(), ["h", "w"]);
}

/// Issue 49, F3: a state's single use is remembered as long as the state is
/// valid, whichever replica answers it: sealed on a replica with a 10 minute
/// `--approval-timeout` and answered on one with 1 s, the claim (read in
/// Redis) lives the state's 10 minutes and a minute more, not the answering
/// replica's second (after which the same answer ran the call again).
#[test]
fn a_claim_lives_as_long_as_its_state_whichever_replica_answers() {
    let setup = Setup::new("claim-ttl", "");
    let tokens = setup.tokens(&[("ada", "ada-secret")]);
    let redis = crate::support::RedisServer::start("claim-ttl");
    let start = |timeout: &str| setup.replica(timeout, &tokens, Some(&redis.url()));
    let (long, short) = (start("10m"), start("1s"));
    let asked = call_2026(&long, "ada-secret", &note("t"), None);
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("a requestState in {asked}"))
        .to_owned();
    let done = call_2026(
        &short,
        "ada-secret",
        &note("t"),
        Some(json!({
            "requestState": state,
            "inputResponses": {"approval": {"action": "accept", "content": {"approve": true}}},
        })),
    );
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"result": {"result": "noted t"}}),
        "{done}"
    );
    // One claim, its time to live in milliseconds: more than the 10 minutes
    // the state had left when it was answered (the minute of margin covers
    // this test's own seconds), at most 11 minutes.
    let ttl = redis.command(&[
        "EVAL",
        "local k = redis.call('KEYS', 'codemode:claim:*') if #k ~= 1 then return -1 end return redis.call('PTTL', k[1])",
        "0",
    ]);
    let ttl: i64 = ttl
        .strip_prefix(':')
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("a claim's PTTL, not {ttl:?}"));
    assert!((600_000..=660_000).contains(&ttl), "{ttl} ms");
    assert_eq!(setup.notes(), ["t"]);
}

/// Two replicas sharing the approval key and the task store: the question
/// comes from one, the answer goes to the other, which replays the program; a
/// state altered, carried by another subject or for another program, answered
/// before, or expired is refused.
#[test]
fn over_http_a_2026_answer_may_reach_another_replica() {
    let setup = Setup::new("replicas", "");
    let tokens = setup.tokens(&[("ada", "ada-secret"), ("bob", "bob-secret")]);
    // Replicas share the task store: a state answered on one is spent on all.
    let redis = crate::support::RedisServer::start("approvals");
    let start = |timeout: &str| setup.replica(timeout, &tokens, Some(&redis.url()));
    let (a, b) = (start("10m"), start("10m"));
    let asked = call_2026(&a, "ada-secret", &note("h"), None);
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    assert_eq!(
        result["inputRequests"]["approval"]["params"]["message"],
        "May ada write a note?\n\nCapability: double.note\nArguments: {\"text\":\"h\"}"
    );
    assert_eq!(
        result["inputRequests"]["approval"]["method"],
        "elicitation/create"
    );
    let state = result["requestState"]
        .as_str()
        .expect("a requestState")
        .to_owned();
    assert_eq!(setup.notes(), Vec::<String>::new());
    let answer = |state: &str, approve: bool| {
        json!({
            "requestState": state,
            "inputResponses": {"approval": {"action": "accept", "content": {"approve": approve}}},
        })
    };
    let denied = |answer: &Value| {
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        assert_eq!(answer["result"]["content"][0]["text"], "permission denied");
    };
    // Altered (one character of the signed part), or carried by another
    // subject: refused, and nothing ran.
    let mut altered = state.clone();
    let at = altered.len() / 2;
    let flipped = if &altered[at..=at] == "A" { "B" } else { "A" };
    altered.replace_range(at..=at, flipped);
    denied(&call_2026(
        &b,
        "ada-secret",
        &note("h"),
        Some(answer(&altered, true)),
    ));
    denied(&call_2026(
        &b,
        "bob-secret",
        &note("h"),
        Some(answer(&state, true)),
    ));
    // Another program with this state: refused.
    denied(&call_2026(
        &b,
        "ada-secret",
        &note("i"),
        Some(answer(&state, true)),
    ));
    crate::support::wait_for_log(&b, "execute refused: its requestState does not open", 3);
    assert_eq!(setup.notes(), Vec::<String>::new());
    // Answered on the other replica: it replays the program and the note runs.
    let done = call_2026(&b, "ada-secret", &note("h"), Some(answer(&state, true)));
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"result": {"result": "noted h"}}),
        "{done}"
    );
    assert_eq!(setup.notes(), ["h"]);
    // A state is answered once: the same answer again (a retried POST, say)
    // runs nothing, on either replica.
    for replica in [&a, &b] {
        denied(&call_2026(
            replica,
            "ada-secret",
            &note("h"),
            Some(answer(&state, true)),
        ));
    }
    crate::support::wait_for_log(
        &a,
        "reason=requestState was answered already: a state is answered once",
        1,
    );
    assert_eq!(setup.notes(), ["h"]);
    // A retry that carries no answer is denied (and spends the state).
    let asked = call_2026(&a, "ada-secret", &note("j"), None);
    let state = asked["result"]["requestState"]
        .as_str()
        .expect("a requestState")
        .to_owned();
    let out = call_2026(
        &b,
        "ada-secret",
        &note("j"),
        Some(json!({"requestState": state})),
    );
    denied(&out);
    assert_eq!(
        out["result"]["_meta"]["codemode/error"]["capability"],
        "double.note"
    );
    crate::support::wait_for_log(&b, "reason=the retry carried no answer to the approval", 1);
    assert_eq!(setup.notes(), ["h"]);
    // A retry from a client that takes tasks is answered directly: a task
    // would run the program again without its record.
    let asked = call_2026(&a, "ada-secret", &note("k"), None);
    let state = asked["result"]["requestState"]
        .as_str()
        .expect("a requestState");
    let mut retry = answer(state, true);
    retry["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "approval-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {"form": {}},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        },
    });
    let done = call_2026(&b, "ada-secret", &note("k"), Some(retry));
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(setup.notes(), ["h", "k"]);
    // A state past --approval-timeout is refused (declined meanwhile: nothing runs).
    let quick = start("1s");
    let asked = call_2026(&quick, "ada-secret", &note("late"), None);
    let state = asked["result"]["requestState"]
        .as_str()
        .expect("a requestState")
        .to_owned();
    crate::support::wait_until(
        "the state to expire",
        || {
            denied(&call_2026(
                &b,
                "ada-secret",
                &note("late"),
                Some(answer(&state, false)),
            ));
            b.log().contains("reason=request state has expired")
        },
        || b.log(),
    );
    assert_eq!(setup.notes(), ["h", "k"]);
}

/// With `--http-sessions` an older client over Streamable HTTP is asked: the
/// question rides the `tools/call`'s SSE response, the answer comes back in the
/// client's session. The Python SDK approves one note and declines the next.
#[test]
fn with_http_sessions_an_older_client_is_asked_over_http() {
    let setup = Setup::new("http-sessions", "");
    let args = setup.args(&["--http-sessions"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = HttpServer::start(&args);
    let call =
        |source: String| json!({"op": "call", "tool": "execute", "arguments": {"source": source}});
    let script = json!({
        "url": format!("http://127.0.0.1:{}/mcp", server.port),
        "mode": "legacy",
        "elicitation": [accept(true, false), {"action": "decline"}],
        "steps": [call(note("a")), call(note("b"))],
    });
    let out = run_driver(&script);
    assert_eq!(out["results"][0]["is_error"], false, "{out}");
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": {"result": "noted a"}}),
        "{out}"
    );
    let result = &out["results"][1];
    assert_eq!(result["text"], json!(["permission denied"]), "{out}");
    let messages = messages(&out);
    assert_eq!(messages, [QUESTION, &QUESTION.replace("\"a\"", "\"b\"")]);
    assert_eq!(setup.notes(), ["a"]);
    assert_eq!(
        setup.asked(),
        [
            asked("local", "approved", "ok"),
            asked("local", "declined", "permission denied"),
        ]
    );
}

/// A session belongs to the subject that opened it: another subject naming its
/// ID is answered as for an unknown one. A subject holds at most
/// `MAX_SESSIONS_PER_SUBJECT` sessions; one closed makes room again.
#[test]
fn a_session_is_its_subjects_alone_and_bounded() {
    let setup = Setup::new("http-sessions-owners", "");
    let tokens = setup.tokens(&[("alice", "alice-token"), ("bob", "bob-token")]);
    let args = setup.args(&["--http-sessions", "--tokens", &tokens]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = HttpServer::start(&args);
    let post = |token: &str, session: Option<&str>, body: Value| {
        session_post(server.port, token, session, &body)
    };
    let open = |token: &str| {
        let response = post(token, None, initialize());
        (
            response.status,
            response
                .header(codemode_server::mcp::SESSION_HEADER)
                .map(str::to_owned),
            response.body,
        )
    };
    let (status, alices, body) = open("alice-token");
    assert_eq!(status, 200, "{body}");
    let alices = alices.expect("a session ID");
    assert_eq!(
        post("alice-token", Some(&alices), initialized()).status,
        202
    );
    let list = tools_list();
    let bobs_try = post("bob-token", Some(&alices), list.clone());
    let unknown = post("bob-token", Some("no-such-session"), list.clone());
    assert_eq!(
        (bobs_try.status, bobs_try.body.as_str()),
        (404, "Not Found: Session not found")
    );
    assert_eq!(
        (unknown.status, unknown.body.as_str()),
        (404, "Not Found: Session not found")
    );
    // The session's stream: one open at a time (each holds a connection).
    let stream_request = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer alice-token\r\nAccept: text/event-stream\r\nMcp-Session-Id: {alices}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n",
        server.port
    );
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    std::io::Write::write_all(&mut stream, stream_request.as_bytes()).expect("send the GET");
    let mut first = [0u8; 12];
    std::io::Read::read_exact(&mut stream, &mut first).expect("the stream's status line");
    assert_eq!(&first, b"HTTP/1.1 200");
    let second = crate::support::raw_request(
        server.port,
        "GET",
        "/mcp",
        &[
            ("Authorization", "Bearer alice-token"),
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", &alices),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        "",
    );
    assert_eq!(
        (second.status, second.body.as_str()),
        (409, codemode_server::mcp::STREAM_OPEN)
    );
    drop(stream);
    let listed = post("alice-token", Some(&alices), list);
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains("\"search_api\""), "{}", listed.body);
    // Alice holds one; she may open the rest up to the limit, then no more.
    for _ in 1..codemode_server::mcp::MAX_SESSIONS_PER_SUBJECT {
        let (status, id, body) = open("alice-token");
        assert_eq!((status, id.is_some()), (200, true), "{body}");
    }
    let (status, id, body) = open("alice-token");
    assert_eq!(
        (status, id, body.as_str()),
        (503, None, codemode_server::mcp::TOO_MANY_SESSIONS)
    );
    assert_eq!(open("bob-token").0, 200);
    // One closed makes room.
    let bearer = "Bearer alice-token";
    let closed = crate::support::raw_request(
        server.port,
        "DELETE",
        "/mcp",
        &[
            ("Authorization", bearer),
            ("Mcp-Session-Id", &alices),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        "",
    );
    // 204, as the official SDKs expect (rmcp's own answer, 202, made the
    // Python SDK report a failed termination).
    assert_eq!(
        (closed.status, closed.body.as_str()),
        (204, ""),
        "{closed:?}"
    );
    assert_eq!(open("alice-token").0, 200);
}

/// A POST of `body` to `/mcp` of the server at `port` with `token`, in
/// `session` when given, as a client of 2025-11-25 sends it.
fn session_post(
    port: u16,
    token: &str,
    session: Option<&str>,
    body: &Value,
) -> crate::support::RawResponse {
    let bearer = format!("Bearer {token}");
    let mut headers = vec![
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
    }
    crate::support::raw_request(port, "POST", "/mcp", &headers, &body.to_string())
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "sessions-test", "version": "1"}}})
}

fn initialized() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
}

fn tools_list() -> Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
}

/// What a replica logs for each answer it forwards to the replica that asked.
const FORWARDED: &str = "an answer forwarded to the replica that asked";

/// Ends session `id` on the server at `port` (`DELETE`).
fn session_delete(port: u16, token: &str, id: &str) -> crate::support::RawResponse {
    let bearer = format!("Bearer {token}");
    crate::support::raw_request(
        port,
        "DELETE",
        "/mcp",
        &[
            ("Authorization", bearer.as_str()),
            ("Mcp-Session-Id", id),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        "",
    )
}

/// Opens a session on the server at `port` for `token`: its ID.
fn open_session(port: u16, token: &str) -> String {
    let opened = session_post(port, token, None, &initialize());
    assert_eq!(opened.status, 200, "{}", opened.body);
    let id = opened
        .header(codemode_server::mcp::SESSION_HEADER)
        .expect("a session ID")
        .to_owned();
    assert_eq!(
        session_post(port, token, Some(&id), &initialized()).status,
        202
    );
    id
}

/// Whether `response` (to [`tools_list`]) lists the catalog.
fn lists_tools(response: &crate::support::RawResponse) -> bool {
    response.status == 200 && response.body.contains("\"search_api\"")
}

/// Two replicas sharing a real `redis-server` as their store, behind a
/// round-robin router (the Python SDK client sends each HTTP request to the
/// next replica): an older client's session, opened on one, is served by both,
/// and its answer to the question a replica asked reaches that replica through
/// the other. Then the replica that opened a session is killed (SIGKILL) and
/// the other serves it on; another subject naming it gets a 404 from either.
#[test]
fn an_older_clients_session_is_served_by_any_replica_sharing_a_redis_store() {
    let mut redis = crate::support::RedisServer::start("approval-sessions");
    let setup = Setup::new("http-sessions-replicas", "");
    let tokens = setup.tokens(&[("local", "local-token"), ("bob", "bob-token")]);
    let url = redis.url();
    let args = setup.args(&["--http-sessions", "--store", &url, "--tokens", &tokens]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = HttpServer::start(&args);
    let b = HttpServer::start(&args);
    let call =
        |source: String| json!({"op": "call", "tool": "execute", "arguments": {"source": source}});
    let mcp = |port: u16| format!("http://127.0.0.1:{port}/mcp");
    let script = json!({
        "url": mcp(a.port),
        "routes": [mcp(a.port), mcp(b.port)],
        "headers": {"Authorization": "Bearer local-token"},
        "mode": "legacy",
        "elicitation": [accept(true, false), {"action": "decline"}],
        "steps": [call(note("a")), call(note("b"))],
    });
    let out = run_driver(&script);
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": {"result": "noted a"}}),
        "{out}"
    );
    assert_eq!(
        out["results"][1]["text"],
        json!(["permission denied"]),
        "{out}"
    );
    assert_eq!(
        messages(&out),
        [QUESTION, &QUESTION.replace("\"a\"", "\"b\"")]
    );
    assert_eq!(setup.notes(), ["a"]);
    // Each answer went to the replica that did not ask (the one after the
    // call's, in turn).
    let routed: Vec<(u64, &str)> = out["routed"]
        .as_array()
        .expect("the routes taken")
        .iter()
        .map(|r| (r[0].as_u64().unwrap_or(9), r[1].as_str().unwrap_or("")))
        .collect();
    let crossed: Vec<bool> = routed
        .windows(2)
        .filter(|pair| pair[0].1 == "tools/call" && pair[1].1 == "answer")
        .map(|pair| pair[0].0 != pair[1].0)
        .collect();
    assert_eq!(crossed, [true, true], "{routed:?}");
    // Both answers were forwarded by the replica that did not ask.
    crate::support::wait_until(
        "both answers forwarded",
        || {
            [&a, &b]
                .iter()
                .map(|server| server.log().matches(FORWARDED).count())
                .sum::<usize>()
                == 2
        },
        || format!("A:\n{}\nB:\n{}", a.log(), b.log()),
    );
    // A session opened on A, ended through A while B holds a copy: B's ends.
    let ended = open_session(a.port, "local-token");
    assert!(lists_tools(&session_post(
        b.port,
        "local-token",
        Some(&ended),
        &tools_list()
    )));
    assert_eq!(session_delete(a.port, "local-token", &ended).status, 204);
    assert_eq!(
        session_post(b.port, "local-token", Some(&ended), &tools_list()).status,
        404
    );
    // A session opened on A, then A killed: B serves it, to its subject only.
    let session = open_session(a.port, "local-token");
    // Another subject cannot answer into it either (checked before any
    // forwarding).
    let forged = json!({"jsonrpc": "2.0", "id": format!("{}.01234567.0", "a".repeat(16)),
        "result": {"action": "accept", "content": {"approve": true}}});
    assert_eq!(
        session_post(b.port, "bob-token", Some(&session), &forged).status,
        404
    );
    let bobs_try = session_post(b.port, "bob-token", Some(&session), &tools_list());
    assert_eq!(
        (bobs_try.status, bobs_try.body.as_str()),
        (404, "Not Found: Session not found")
    );
    assert_eq!(
        session_post(a.port, "bob-token", Some(&session), &tools_list()).status,
        404
    );
    drop(a);
    let listed = session_post(b.port, "local-token", Some(&session), &tools_list());
    assert!(lists_tools(&listed), "{listed:?}");
    // Redis away: the sessions B holds go on; one it does not hold cannot be
    // looked up (503, said so), and can be again once Redis is back.
    redis.kill();
    let listed = session_post(b.port, "local-token", Some(&session), &tools_list());
    assert!(lists_tools(&listed), "{listed:?}");
    let unknown = session_post(b.port, "local-token", Some("elsewhere"), &tools_list());
    assert_eq!(
        (unknown.status, unknown.body.as_str()),
        (503, codemode_server::mcp::SESSIONS_UNAVAILABLE)
    );
    redis.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let unknown = session_post(b.port, "local-token", Some("elsewhere"), &tools_list());
        if unknown.status == 404 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {unknown:?} after Redis came back"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// With the embedded store (a file), a session outlives its server: killed
/// (SIGKILL) and started again on the same file, the server serves the
/// session its client opened before.
#[test]
fn an_older_clients_session_outlives_a_restart_with_the_file_store() {
    let setup = Setup::new("http-sessions-restart", "");
    let tokens = setup.tokens(&[("local", "local-token")]);
    let store = setup.path("store.redb");
    let args = setup.args(&["--http-sessions", "--store", &store, "--tokens", &tokens]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = HttpServer::start(&args);
    let session = open_session(server.port, "local-token");
    drop(server);
    let server = HttpServer::start(&args);
    let listed = session_post(server.port, "local-token", Some(&session), &tools_list());
    assert!(lists_tools(&listed), "{listed:?}");
    // Ended by its client (DELETE), it is gone from the store too.
    let closed = session_delete(server.port, "local-token", &session);
    assert_eq!(closed.status, 204, "{closed:?}");
    drop(server);
    let server = HttpServer::start(&args);
    let gone = session_post(server.port, "local-token", Some(&session), &tools_list());
    assert_eq!(
        (gone.status, gone.body.as_str()),
        (404, "Not Found: Session not found")
    );
}

/// The official TypeScript SDK client answers the question: over stdio, and
/// over Streamable HTTP with `--http-sessions`; approves one note, declines
/// the next.
#[test]
fn the_typescript_client_approves_and_declines() {
    let tools = crate::support::node_tools();
    for over in ["stdio", "http"] {
        let setup = Setup::new(&format!("typescript-{over}"), "");
        let args = setup.args(&["--http-sessions"][..usize::from(over == "http")]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut script = json!({
            "sdk": tools.sdk,
            "answers": [accept(true, false), {"action": "decline"}],
            "sources": [note("a"), note("b")],
        });
        let server;
        if over == "http" {
            server = HttpServer::start(&args);
            script["url"] = json!(format!("http://127.0.0.1:{}/mcp", server.port));
        } else {
            script["command"] = json!(crate::support::host_bin());
            script["args"] = json!(with_cache(&args));
        }
        let out =
            crate::support::run_node(&tools.node, "tests/clients/sdk_elicitation.mjs", &script);
        assert_eq!(
            out["results"][0]["structuredContent"],
            json!({"result": {"result": "noted a"}}),
            "{over}: {out}"
        );
        assert_eq!(out["results"][1]["isError"], true, "{over}: {out}");
        assert_eq!(
            out["results"][1]["content"][0]["text"], "permission denied",
            "{over}: {out}"
        );
        assert_eq!(
            out["results"][1]["_meta"]["codemode/error"],
            json!({"capability": "double.note", "line": 2, "column": 12}),
            "{over}: {out}"
        );
        let messages = messages(&out);
        assert_eq!(
            messages,
            [QUESTION, &QUESTION.replace("\"a\"", "\"b\"")],
            "{over}"
        );
        assert_eq!(setup.notes(), ["a"], "{over}");
    }
}

/// A plugin's annotations (`codemode_sdk::annotations!`) reach the policy:
/// `granted.read` is read-only and runs, `granted.write` is destructive and is
/// asked about. In 2026-07-28 mode each answer runs the program again; the
/// counter it read is replayed from the record, never read again: a second
/// read would see the written value and the program would write another.
#[test]
fn a_plugins_annotations_ask_before_its_writes_and_its_reads_are_not_repeated() {
    let setup = Setup::new("plugin-annotations", "");
    let plugins = setup.dir.join("plugins");
    std::fs::copy(
        crate::support::test_plugin("granted"),
        plugins.join("granted.wasm"),
    )
    .expect("copy the plugin");
    std::fs::create_dir_all(plugins.join("scratch")).expect("scratch");
    std::fs::write(plugins.join("scratch/counter"), "0").expect("counter");
    std::fs::write(
        plugins.join("granted.toml"),
        "[[dirs]]\nhost = \"scratch\"\nguest = \"/scratch\"\nread_only = false\n",
    )
    .expect("write the sidecar");
    let source = "def main():\n    n = int(granted.read(path=\"/scratch/counter\")[\"value\"])\n    granted.write(path=\"/scratch/counter\", value=str(n + 1))\n    granted.write(path=\"/scratch/last\", value=\"done\")\n    return n";
    let out = setup.execute_in(
        "2026-07-28",
        &[],
        Some(json!([accept(true, false)])),
        source,
    );
    assert_eq!(
        out["results"][0]["structured"],
        json!({"result": 0}),
        "{out}"
    );
    let messages = messages(&out);
    assert_eq!(
        messages,
        [
            "May local write a note?\n\nCapability: granted.write\nArguments: {\"path\":\"/scratch/counter\",\"value\":\"1\"}",
            "May local write a note?\n\nCapability: granted.write\nArguments: {\"path\":\"/scratch/last\",\"value\":\"done\"}",
        ]
    );
    let read = |name: &str| std::fs::read_to_string(plugins.join("scratch").join(name)).ok();
    assert_eq!(read("counter").as_deref(), Some("1"));
    assert_eq!(read("last").as_deref(), Some("done"));
    let decisions = setup.decisions();
    assert_eq!(
        decisions,
        [
            "granted.read allow",
            "granted.write awaiting answer",
            "granted.read replayed",
            "granted.write approved",
            "granted.write awaiting answer",
            "granted.read replayed",
            "granted.write replayed",
            "granted.write approved",
        ]
    );
}

/// A 2026-07-28 request of a client declaring the Tasks extension (and, with
/// `elicits`, form elicitation) as the subject of `token`.
fn task_rpc(
    server: &HttpServer,
    token: &str,
    method: &str,
    name: &str,
    mut params: Value,
    elicits: bool,
) -> Value {
    let mut capabilities = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    if elicits {
        capabilities["elicitation"] = json!({"form": {}});
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "approval-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    post_2026(server, token, method, name, params)
}

/// Starts `source` as a task; its ID.
fn start_task(server: &HttpServer, token: &str, source: &str, elicits: bool) -> String {
    let params = json!({"name": "execute", "arguments": {"source": source}});
    let created = task_rpc(server, token, "tools/call", "execute", params, elicits);
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    assert_eq!(created["result"]["status"], "working", "{created}");
    created["result"]["taskId"]
        .as_str()
        .expect("a task ID")
        .to_owned()
}

/// `tasks/get` of task `id`.
fn get_task(server: &HttpServer, token: &str, id: &str) -> Value {
    task_rpc(server, token, "tasks/get", id, json!({"taskId": id}), true)
}

/// `tasks/update` of task `id` with `responses`.
fn update_task(server: &HttpServer, token: &str, id: &str, responses: Value) -> Value {
    let params = json!({"taskId": id, "inputResponses": responses});
    task_rpc(server, token, "tasks/update", id, params, true)
}

/// Polls `tasks/get` until `done` holds for its result; that answer.
fn poll_task(server: &HttpServer, token: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let last = std::cell::RefCell::new(Value::Null);
    crate::support::wait_until(
        "the task's status",
        || {
            *last.borrow_mut() = get_task(server, token, id);
            done(&last.borrow()["result"])
        },
        || last.borrow().to_string(),
    );
    last.into_inner()
}

/// Polls until task `id` asks the question under `key`; its `inputRequests`.
fn until_asked(server: &HttpServer, token: &str, id: &str, key: &str) -> Value {
    let asked = poll_task(server, token, id, |task| {
        task["status"] == "input_required" && task["inputRequests"].get(key).is_some()
    });
    asked["result"]["inputRequests"].clone()
}

/// Polls until task `id` ended; its result.
fn until_ended(server: &HttpServer, token: &str, id: &str) -> Value {
    let ended = poll_task(server, token, id, |task| {
        !matches!(task["status"].as_str(), Some("working" | "input_required"))
    });
    assert_eq!(ended["result"]["status"], "completed", "{ended}");
    ended["result"]["result"].clone()
}

/// The question about `double.note(text=...)` of `subject`, as a task's
/// `inputRequests` entry.
fn note_question(subject: &str, text: &str) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": format!(
                "May {subject} write a note?\n\nCapability: double.note\nArguments: {{\"text\":{text:?}}}"
            ),
            "requestedSchema": form_schema()
        }
    })
}

/// A task asks through itself (the Tasks extension): `tasks/get` shows the
/// question in `inputRequests`, `tasks/update` answers it, on the replica that
/// runs the task or on another sharing Redis. Each question has a key of its
/// own; a response to another key, or from another subject, changes nothing;
/// the execution waits where it is, so the note before the second question is
/// written once. A decline, a timeout and a client without elicitation deny
/// the call, and its note is never written.
#[test]
fn a_task_asks_through_tasks_get_and_tasks_update_on_any_replica() {
    let setup = Setup::new("tasks", "");
    let tokens = setup.tokens(&[("ada", "ada-secret"), ("bob", "bob-secret")]);
    let redis = crate::support::RedisServer::start("task-approvals");
    let start = |extra: &[&str]| {
        let mut args = setup.args(extra);
        args.extend(["--tokens".to_owned(), tokens.clone()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        HttpServer::start(&args)
    };
    let url = redis.url();
    let (a, b) = (
        start(&["--task-store", &url]),
        start(&["--task-store", &url]),
    );
    let ada = "ada-secret";
    let ack = json!({"resultType": "complete"});
    let source = "def main():\n    first = double.note(text=\"one\")\n    second = double.note(text=\"two\")\n    return [first, second]";
    let id = start_task(&a, ada, source, true);
    // Read on B: the first question.
    assert_eq!(
        until_asked(&b, ada, &id, "approval-1"),
        json!({"approval-1": note_question("ada", "one")})
    );
    // Another subject does not find the task; a response to a key that is not
    // asked is ignored.
    assert_eq!(
        update_task(
            &b,
            "bob-secret",
            &id,
            json!({"approval-1": accept(true, false)})
        )["error"],
        json!({"code": -32602, "message": "Failed to retrieve task: Task not found"})
    );
    assert_eq!(
        update_task(&b, ada, &id, json!({"approval-7": accept(true, false)}))["result"],
        ack
    );
    assert_eq!(get_task(&a, ada, &id)["result"]["status"], "input_required");
    assert_eq!(setup.notes(), Vec::<String>::new());
    // Approved on B: the execution on A goes on, and asks the next question.
    assert_eq!(
        update_task(&b, ada, &id, json!({"approval-1": accept(true, false)}))["result"],
        ack
    );
    assert_eq!(
        until_asked(&a, ada, &id, "approval-2"),
        json!({"approval-2": note_question("ada", "two")})
    );
    assert_eq!(setup.notes(), ["one"]);
    // Declined on A: the call is denied, the task completes with the answer a
    // direct call gets.
    assert_eq!(
        update_task(&a, ada, &id, json!({"approval-2": {"action": "decline"}}))["result"],
        ack
    );
    let result = until_ended(&b, ada, &id);
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["content"][0]["text"], "permission denied");
    assert_eq!(
        result["_meta"]["codemode/error"],
        json!({"capability": "double.note", "line": 3, "column": 14})
    );
    // Answering the ended task again changes nothing.
    assert_eq!(
        update_task(&a, ada, &id, json!({"approval-2": accept(true, false)}))["result"],
        ack
    );
    assert_eq!(setup.notes(), ["one"]);
    // Nobody answers within --approval-timeout: the task works again and the
    // call is denied; a late answer is ignored.
    let quick = start(&["--task-store", &url, "--approval-timeout", "1s"]);
    let late = start_task(&quick, ada, &note("late"), true);
    until_asked(&b, ada, &late, "approval-1");
    let result = until_ended(&b, ada, &late);
    assert_eq!(
        result["content"][0]["text"], "permission denied",
        "{result}"
    );
    assert_eq!(
        update_task(&b, ada, &late, json!({"approval-1": accept(true, false)}))["result"],
        ack
    );
    // A client that declared no elicitation is not asked.
    let unasked = start_task(&quick, ada, &note("unasked"), false);
    let result = until_ended(&quick, ada, &unasked);
    assert_eq!(
        result["content"][0]["text"], "permission denied",
        "{result}"
    );
    crate::support::wait_for_log(
        &quick,
        "reason=the client did not declare form elicitation",
        1,
    );
    // In this server's memory (no --task-store) alike.
    let alone = start(&[]);
    let here = start_task(&alone, ada, &note("here"), true);
    until_asked(&alone, ada, &here, "approval-1");
    assert_eq!(
        update_task(
            &alone,
            ada,
            &here,
            json!({"approval-1": accept(true, false)})
        )["result"],
        ack
    );
    let result = until_ended(&alone, ada, &here);
    assert_eq!(
        result["structuredContent"],
        json!({"result": {"result": "noted here"}}),
        "{result}"
    );
    assert_eq!(setup.notes(), ["one", "here"]);
    // The last audit line may be written just after the answer.
    crate::support::wait_until(
        "five audit lines of double.note",
        || setup.asked().len() == 5,
        || format!("{:?}", setup.asked()),
    );
    let outcome = |outcome: &str, result: &str| asked("ada", outcome, result);
    assert_eq!(
        setup.asked(),
        [
            outcome("approved", "ok"),
            outcome("declined", "permission denied"),
            outcome("timed out", "permission denied"),
            outcome("not asked", "permission denied"),
            outcome("approved", "ok"),
        ]
    );
}

//! Services described by OpenAPI as capabilities, end to end: the real binary
//! with a config file whose `[[openapi]]` tables name a FastAPI application
//! (`tests/services/shop.py`, PyPI `fastapi` + `uvicorn`) by the URL of its
//! generated `/openapi.json`, driven by the Python MCP client over stdio and
//! over HTTP; and GitHub's own description (npm `@octokit/openapi`) mocked by
//! Prism (npm `@stoplight/prism-cli`) on loopback.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::stdio::{call, err, ok};
use crate::support::{
    HttpServer, call_tool, drive_http, example_plugins, raw_request, root, wait_for_audit,
    wait_for_log, wait_until,
};
use crate::upstream::upstream_bin;

/// The FastAPI shop on a free loopback port, ended (by its PID) when dropped.
pub(crate) struct Shop {
    child: Child,
    port: u16,
}

impl Shop {
    pub(crate) fn start() -> Self {
        Self::start_with(&[])
    }

    /// The shop, its script given `args` (`--tls CERT KEY`).
    fn start_with(args: &[&std::path::Path]) -> Self {
        let mut child = Command::new(upstream_bin().join("python"))
            .arg(root().join("tests/services/shop.py"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the FastAPI shop");
        let stdout = child.stdout.take().expect("its stdout");
        // Its first line comes once it accepts connections; a shop that dies
        // first ends the stream, and the test with it.
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the shop's first line");
        let port = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("the shop did not start: {line:?}"));
        Self { child, port }
    }

    pub(crate) fn spec_url(&self) -> String {
        format!("http://127.0.0.1:{}/openapi.json", self.port)
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The README's section "Services described by OpenAPI": its TOML block and
/// its program.
fn readme_example() -> (String, String) {
    let readme = include_str!("../README.md");
    let section = readme
        .split("## Services described by OpenAPI")
        .nth(1)
        .expect("the README has the section");
    let block = |fence: &str| {
        section
            .split(fence)
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("the section has the block")
            .to_owned()
    };
    (block("```toml\n"), block("```python\n"))
}

/// The README's config naming the shop as `shop` (the right key, from a
/// variable), and `badshop` with a wrong one (from a file), in a fresh folder
/// of the test `label`, and the folder the server starts in (no plugins
/// folder).
fn config(label: &str, shop: &Shop) -> (PathBuf, PathBuf) {
    let dir = root().join("target/e2e-openapi").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("cwd")).expect("create the folders");
    std::fs::write(dir.join("wrong.key"), "not-the-key\n").expect("write the key file");
    let path = dir.join("codemode.toml");
    let (readme, _) = readme_example();
    let readme = readme.replace("http://127.0.0.1:8000/openapi.json", &shop.spec_url());
    std::fs::write(
        &path,
        format!(
            r#"{readme}
[[openapi]]
name = "badshop"
spec = "{spec}"
api-key-header = "X-API-Key"
api-key-file = "wrong.key"
include = ["readItem"]
"#,
            spec = shop.spec_url()
        ),
    )
    .expect("write the config");
    (path, dir.join("cwd"))
}

/// The trace context a client's request carries.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn execute(source: &str) -> Value {
    call("execute", json!({ "source": source }))
}

#[test]
fn a_fastapi_service_is_searched_described_and_called_over_stdio() {
    let shop = Shop::start();
    let (path, cwd) = config("stdio", &shop);
    // Its answer is a JSON object of strings (no properties): `{result: {...}}`.
    let mut traced =
        execute("def main():\n    return shop.seen_trace()[\"result\"][\"traceparent\"]");
    traced["meta"] = json!({ "traceparent": TRACEPARENT });
    let out = crate::support::run_driver(&json!({
        "command": crate::support::host_bin(),
        "args": crate::support::with_cache(&["--config", path.to_str().expect("utf-8")]),
        "cwd": cwd,
        "env": {"SHOP_KEY": "shop-key"},
        "mode": "legacy",
        "steps": [
            call("search_api", json!({"query": "create a new item in the shop"})),
            call("describe_api", json!({"name": "shop.list_items"})),
            execute(
                "def main():\n    made = shop.create_item(name=\"saw\", price=20.0, tags=[\"tools\"])\n    got = shop.read_item(item_id=made[\"id\"])\n    cheap = shop.list_items(max_price=5.0, tag=[\"small\"])\n    return {\"made\": made[\"id\"], \"got\": got[\"name\"], \"cheap\": sorted([i[\"name\"] for i in cheap[\"result\"]]), \"health\": shop.health()[\"text\"]}"
            ),
            execute("def main():\n    return shop.read_item(item_id=99)"),
            execute("def main():\n    return badshop.read_item(item_id=1)"),
            execute(
                "def main():\n    shop.delete_item_items_item_id_delete(item_id=1)\n    return shop.read_item(item_id=1)"
            ),
            execute("def main():\n    return shop.read_item(item_id=\"one\")"),
            execute(&readme_example().1),
            traced,
        ],
    }));
    let results = out["results"].as_array().expect("results");
    let found = ok(&results[0]);
    assert_eq!(found["results"][0]["name"], "shop.create_item", "{found}");
    let described = ok(&results[1]);
    assert_eq!(described["summary"], "List the items of the shop");
    assert_eq!(
        described["output"],
        json!([{"name": "result", "type": "list[{name: str, price: float, tags: list[str] | None, id: int}] | None", "required": true}])
    );
    assert_eq!(
        described["signature"],
        "shop.list_items(*, max_price: float | None, tag: list[str] | None)",
        "{described}"
    );
    assert_eq!(
        described["description"],
        "GET /items\n\nArguments:\n- max_price: Only items at most this price.\n- tag: Only items with all these tags. (default: [])",
        "{described}"
    );
    assert_eq!(
        ok(&results[2])["result"],
        json!({"made": 4, "got": "saw", "cheap": ["glue", "nails"], "health": "ok"})
    );
    assert_eq!(
        err(&results[3]),
        r#"capability failed: HTTP 404 Not Found: {"detail":"Item not found"}"#
    );
    assert_eq!(
        err(&results[4]),
        r#"capability failed: HTTP 401 Unauthorized: {"detail":"wrong API key"}"#
    );
    assert_eq!(
        err(&results[5]),
        r#"capability failed: HTTP 404 Not Found: {"detail":"Item not found"}"#
    );
    assert_eq!(
        ok(&results[7])["result"],
        json!({"made": 5, "cheap": ["glue", "nails"]})
    );
    // The request's trace context reached the service as it came.
    assert_eq!(ok(&results[8])["result"], json!(TRACEPARENT));
    // Bound against the operation's parameters before any request is made.
    assert_eq!(
        err(&results[6]),
        "invalid capability arguments: argument \"item_id\" must be an integer"
    );
}

#[test]
fn a_fastapi_service_is_called_over_http_and_audited_by_its_id() {
    let shop = Shop::start();
    let (path, cwd) = config("http", &shop);
    let server = HttpServer::start_with_env(
        &[
            "--config",
            path.to_str().expect("utf-8"),
            "--allow-all",
            "--plugins",
            cwd.to_str().expect("utf-8"),
        ],
        &[("SHOP_KEY", "shop-key")],
    );
    let out = drive_http(
        &server.url(),
        json!({}),
        "legacy",
        json!([execute(
            "def main():\n    return [shop.read_item(item_id=2)[\"name\"], len(shop.list_items(tag=[\"tools\"])[\"result\"])]"
        )]),
    );
    assert_eq!(ok(&out["results"][0])["result"], json!(["nails", 2]));
    wait_for_audit(&server, "\"capability_id\":\"openapi:shop/readItem\"", 1);
}

/// Prism mocking GitHub's own OpenAPI description on a free loopback port,
/// ended (by its PID) when dropped.
struct Prism {
    child: Child,
    port: u16,
    /// The description it mocks: the one the server reads too.
    spec: PathBuf,
}

impl Prism {
    fn start() -> Self {
        let tools = crate::support::tool(&devtools::OPENAPI_NODE).join("node_modules");
        let spec = tools.join("@octokit/openapi/generated/api.github.com.json");
        let port = crate::support::free_port();
        // Its warnings go to a file: a pipe nobody reads would stall it.
        let errors = root().join(format!("target/e2e-openapi/prism-{port}.err"));
        std::fs::create_dir_all(errors.parent().expect("a folder")).expect("create the folder");
        let stderr = std::fs::File::create(&errors).expect("create Prism's error file");
        let mut child = Command::new(&crate::support::node_tools().node)
            .arg(tools.join("@stoplight/prism-cli/dist/index.js"))
            // One process, the one ended by its PID.
            .args(["mock", "--multiprocess=false", "-h", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .arg(&spec)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start Prism");
        let stdout = child.stdout.take().expect("its stdout");
        // Prism logs every operation it mocks, then that it listens; a Prism
        // that dies first ends the stream, and the test with it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("Prism is listening") {
                    let _ = tx.send(());
                }
            }
        });
        if rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .is_err()
        {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "Prism did not start within 120 s: {}",
                std::fs::read_to_string(&errors).unwrap_or_default()
            );
        }
        Self { child, port, spec }
    }
}

impl Drop for Prism {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Twenty tasks as a user would type them, each with the operation meant and
/// the rank search gives it (`None`: not among the results): written before
/// the ranking was tuned for GitHub, and reported in docs/performance.md.
const GITHUB_QUERIES: [(&str, &str, Option<usize>); 20] = [
    ("get a repository", "repos_get", Some(1)),
    (
        "list issues in a repository",
        "issues_list_for_repo",
        Some(1),
    ),
    ("create an issue", "issues_create", Some(1)),
    ("open a pull request", "pulls_create", Some(1)),
    ("merge a pull request", "pulls_merge", Some(1)),
    ("list pull requests", "pulls_list", Some(1)),
    ("get a user by username", "users_get_by_username", Some(1)),
    (
        "star a repository",
        "activity_star_repo_for_authenticated_user",
        Some(1),
    ),
    ("list commits", "repos_list_commits", Some(1)),
    ("read file contents", "repos_get_content", Some(1)),
    ("create a release", "repos_create_release", Some(1)),
    ("list branches", "repos_list_branches", Some(1)),
    (
        "add a comment to an issue",
        "issues_create_comment",
        Some(1),
    ),
    ("search code", "search_code", Some(1)),
    (
        "list workflow runs",
        "actions_list_workflow_runs_for_repo",
        Some(2),
    ),
    ("create a gist", "gists_create", Some(1)),
    ("fork a repository", "repos_create_fork", Some(6)),
    ("add labels to an issue", "issues_add_labels", Some(1)),
    (
        "list my notifications",
        "activity_list_notifications_for_authenticated_user",
        Some(1),
    ),
    // GitHub deletes a branch as a Git reference: "Delete a reference".
    ("delete a branch", "git_delete_ref", None),
];

#[test]
fn github_s_own_description_is_searched_and_called_through_prism() {
    let prism = Prism::start();
    let dir = root().join("target/e2e-openapi/github");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("cwd")).expect("create the folders");
    let path = dir.join("codemode.toml");
    std::fs::write(
        &path,
        format!(
            r#"[[openapi]]
name = "github"
spec = {spec:?}
base-url = "http://127.0.0.1:{port}"
bearer-token-env = "GITHUB_TOKEN"
headers = {{ "X-GitHub-Api-Version" = "2022-11-28" }}
timeout = "20s"
"#,
            spec = prism.spec.display().to_string(),
            port = prism.port
        ),
    )
    .expect("write the config");
    let mut steps: Vec<Value> = GITHUB_QUERIES
        .iter()
        .map(|(query, _, _)| call("search_api", json!({ "query": query })))
        .collect();
    steps.extend([
            call("describe_api", json!({"name": "github.issues_list_for_repo"})),
            execute(
                "def main():\n    repo = github.repos_get(owner=\"octocat\", repo=\"Hello-World\")\n    issues = github.issues_list_for_repo(owner=\"octocat\", repo=\"Hello-World\", state=\"open\", per_page=5)[\"result\"]\n    owner = github.users_get_by_username(username=repo[\"owner\"][\"login\"])\n    return {\"repo\": repo[\"full_name\"], \"stars\": repo[\"stargazers_count\"], \"issues\": [i[\"title\"] for i in issues], \"owner\": owner[\"login\"]}"
            ),
    ]);
    let out = crate::support::run_driver(&json!({
        "command": crate::support::host_bin(),
        "args": crate::support::with_cache(&["--config", path.to_str().expect("utf-8")]),
        "cwd": dir.join("cwd"),
        "env": {"GITHUB_TOKEN": "ghp_mocked"},
        "mode": "legacy",
        "steps": steps,
    }));
    let results = out["results"].as_array().expect("results");
    let ranks: Vec<(&str, Option<usize>)> = GITHUB_QUERIES
        .iter()
        .zip(results)
        .map(|((query, meant, _), found)| {
            let rank = ok(found)["results"]
                .as_array()
                .expect("search results")
                .iter()
                .position(|r| r["name"] == format!("github.{meant}"))
                .map(|at| at + 1);
            (*query, rank)
        })
        .collect();
    let expected: Vec<(&str, Option<usize>)> = GITHUB_QUERIES
        .iter()
        .map(|(query, _, rank)| (*query, *rank))
        .collect();
    assert_eq!(ranks, expected);
    let results = &results[GITHUB_QUERIES.len()..];
    let described = ok(&results[0]);
    assert_eq!(
        described["signature"],
        "github.issues_list_for_repo(*, owner: str, repo: str, milestone: str | None, state: \"open\" | \"closed\" | \"all\" | None, assignee: str | None, type: str | None, creator: str | None, mentioned: str | None, issue_field_values: str | None, labels: str | None, sort: \"created\" | \"updated\" | \"comments\" | None, direction: \"asc\" | \"desc\" | None, since: str | None, per_page: int | None, page: int | None)",
        "{described}"
    );
    assert_eq!(
        ok(&results[1])["result"],
        json!({"repo": "octocat/Hello-World", "stars": 80, "issues": ["Found a bug"], "owner": "octocat"})
    );
}

/// The README's `ask.rego`: reads run, writes wait for the user, the rest is
/// denied.
fn readme_ask_policy() -> String {
    let readme = include_str!("../README.md");
    let start = readme.find("# ask.rego").expect("the README has ask.rego");
    readme[start..]
        .split("```")
        .next()
        .expect("the block ends")
        .to_owned()
}

#[test]
fn the_readme_ask_policy_decides_openapi_calls_by_their_method() {
    let shop = Shop::start();
    let (path, cwd) = config("ask", &shop);
    let policy = path.with_file_name("ask.rego");
    std::fs::write(&policy, readme_ask_policy()).expect("write the policy");
    let out = crate::support::run_driver(&json!({
        "command": crate::support::host_bin(),
        "args": crate::support::with_cache(&[
            "--config",
            path.to_str().expect("utf-8"),
            "--policy",
            policy.to_str().expect("utf-8"),
        ]),
        "cwd": cwd,
        "env": {"SHOP_KEY": "shop-key"},
        "mode": "legacy",
        "elicitation": [
            {"action": "accept", "content": {"approve": true, "approve_for_this_execution": false}},
            {"action": "decline"},
        ],
        "steps": [
            execute("def main():\n    return shop.read_item(item_id=2)[\"name\"]"),
            execute("def main():\n    return shop.create_item(name=\"saw\", price=20.0)[\"id\"]"),
            execute("def main():\n    shop.delete_item_items_item_id_delete(item_id=4)\n    return \"gone\""),
            execute("def main():\n    return shop.read_item(item_id=4)[\"name\"]"),
        ],
    }));
    let results = out["results"].as_array().expect("results");
    // GET runs unasked; POST is asked about and approved; DELETE is asked
    // about as destructive and declined, and the item is still there.
    assert_eq!(ok(&results[0])["result"], json!("nails"));
    assert_eq!(ok(&results[1])["result"], json!(4));
    assert_eq!(err(&results[2]), "permission denied");
    assert_eq!(ok(&results[3])["result"], json!("saw"));
    let asked: Vec<String> = out["elicitations"]
        .as_array()
        .expect("elicitations")
        .iter()
        .map(|e| {
            e["message"]
                .as_str()
                .and_then(|m| m.lines().next())
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(
        asked,
        [
            "local wants to run shop.create_item, which changes things.",
            "local wants to run shop.delete_item_items_item_id_delete, which may destroy data.",
        ]
    );
}

/// The description of `name` over raw HTTP.
fn described(port: u16, name: &str) -> Value {
    call_tool(port, "describe_api", json!({ "name": name }))
}

#[test]
fn a_changed_spec_file_serves_after_a_reload_and_a_broken_one_changes_nothing() {
    let shop = Shop::start();
    let dir = root().join("target/e2e-openapi/reload");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plugins")).expect("create the folders");
    let spec = dir.join("shop.json");
    let status = Command::new(upstream_bin().join("python"))
        .arg(root().join("tests/services/shop.py"))
        .arg("--spec")
        .arg(&spec)
        .status()
        .expect("write the shop's spec");
    assert!(status.success());
    let path = dir.join("codemode.toml");
    std::fs::write(
        &path,
        format!(
            "plugins = \"plugins\"\n\n[[openapi]]\nname = \"shop\"\nspec = \"shop.json\"\nbase-url = \"http://127.0.0.1:{}\"\napi-key-header = \"X-API-Key\"\napi-key-env = \"SHOP_KEY\"\n",
            shop.port
        ),
    )
    .expect("write the config");
    let server = HttpServer::start_with_env(
        &["--config", path.to_str().expect("utf-8"), "--allow-all"],
        &[("SHOP_KEY", "shop-key")],
    );
    wait_until(
        "the spec to load",
        || {
            described(server.port, "shop.read_item")["structuredContent"]["summary"]
                == "Read one item by its ID"
        },
        || server.log(),
    );
    // The spec file changes: one summary, and one operation fewer. A new
    // version is written beside it and renamed over it, as editors do.
    let text = std::fs::read_to_string(&spec).expect("read the spec");
    let mut document: Value = serde_json::from_str(&text).expect("the spec is JSON");
    document["paths"]["/items/{item_id}"]["get"]["summary"] = json!("Fetch one item");
    document["paths"]
        .as_object_mut()
        .expect("paths")
        .remove("/health");
    let next = dir.join("shop.json.new");
    std::fs::write(&next, document.to_string()).expect("write the new spec");
    std::fs::rename(&next, &spec).expect("replace the spec");
    server.signal("HUP");
    wait_until(
        "the new spec to serve",
        || {
            described(server.port, "shop.read_item")["structuredContent"]["summary"]
                == "Fetch one item"
        },
        || server.log(),
    );
    let gone = described(server.port, "shop.health");
    assert_eq!(gone["isError"], json!(true), "{gone}");
    assert_eq!(
        execute_on(
            server.port,
            "def main():\n    return shop.read_item(item_id=3)[\"name\"]"
        ),
        Ok(json!("glue"))
    );
    // A spec that no longer parses: the last version serves on, with a WARN.
    std::fs::write(&next, "{").expect("write a broken spec");
    std::fs::rename(&next, &spec).expect("replace the spec");
    server.signal("HUP");
    wait_for_log(&server, "spec not reloaded: the last version serves on", 1);
    assert_eq!(
        described(server.port, "shop.read_item")["structuredContent"]["summary"],
        "Fetch one item"
    );
}

/// `execute` of `source` over raw HTTP.
fn execute_on(port: u16, source: &str) -> Result<Value, String> {
    crate::support::execute_http(port, source)
}

#[test]
fn a_service_named_like_a_plugin_keeps_its_root_and_the_plugin_is_refused() {
    let shop = Shop::start();
    let dir = root().join("target/e2e-openapi/collision");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the folder");
    let path = dir.join("codemode.toml");
    std::fs::write(
        &path,
        format!(
            "[[openapi]]\nname = \"records\"\nspec = \"{}\"\napi-key-header = \"X-API-Key\"\napi-key-env = \"SHOP_KEY\"\n",
            shop.spec_url()
        ),
    )
    .expect("write the config");
    let examples = example_plugins();
    let server = HttpServer::start_with_env(
        &[
            "--config",
            path.to_str().expect("utf-8"),
            "--plugins",
            examples.to_str().expect("utf-8"),
            "--allow-all",
        ],
        &[("SHOP_KEY", "shop-key")],
    );
    wait_until(
        "the spec to load",
        || {
            described(server.port, "records.read_item")["structuredContent"]["name"]
                == "records.read_item"
        },
        || server.log(),
    );
    let readyz = raw_request(server.port, "GET", "/readyz", &[], "");
    assert_eq!(
        (readyz.status, readyz.body.as_str()),
        (
            200,
            "ready\nplugins left out:\n  records.wasm: capability name `records.lookup` is under `records`, the root of the configured openapi records\n"
        )
    );
}

#[test]
fn a_slow_or_huge_answer_and_a_spec_that_does_not_load_stay_contained() {
    let shop = Shop::start();
    let dir = root().join("target/e2e-openapi/contained");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plugins")).expect("create the folders");
    std::fs::write(dir.join("old.json"), r#"{"swagger": "2.0", "paths": {}}"#)
        .expect("write the old spec");
    // The shop's spec as a YAML file (PyYAML, in the client's venv).
    let json_spec = dir.join("shop.json");
    let written = Command::new(upstream_bin().join("python"))
        .arg(root().join("tests/services/shop.py"))
        .arg("--spec")
        .arg(&json_spec)
        .status()
        .expect("write the shop's spec");
    assert!(written.success());
    let converted = Command::new(crate::support::python())
        .args([
            "-c",
            "import json, sys, yaml; yaml.safe_dump(json.load(open(sys.argv[1])), open(sys.argv[2], 'w'), sort_keys=False)",
        ])
        .arg(&json_spec)
        .arg(dir.join("shop.yaml"))
        .status()
        .expect("convert the spec to YAML");
    assert!(converted.success());
    let path = dir.join("codemode.toml");
    std::fs::write(
        &path,
        format!(
            r#"plugins = "plugins"

[[openapi]]
name = "shop"
spec = "{spec}"
api-key-header = "X-API-Key"
api-key-env = "SHOP_KEY"
include = ["big", "bigStream", "many", "readItem"]

[[openapi]]
name = "slowshop"
spec = "{spec}"
api-key-header = "X-API-Key"
api-key-env = "SHOP_KEY"
include = ["slow"]
timeout = "1s"

[[openapi]]
name = "old"
spec = "old.json"
base-url = "http://127.0.0.1:1"

[[openapi]]
name = "yamlshop"
spec = "shop.yaml"
base-url = "http://127.0.0.1:{port}"
api-key-header = "X-API-Key"
api-key-env = "SHOP_KEY"
include = ["readItem"]
"#,
            spec = shop.spec_url(),
            port = shop.port
        ),
    )
    .expect("write the config");
    let server = HttpServer::start_with_env(
        &["--config", path.to_str().expect("utf-8"), "--allow-all"],
        &[("SHOP_KEY", "shop-key")],
    );
    wait_for_log(&server, "spec not loaded: the service serves nothing", 1);
    // The log line comes before the offer reaches /readyz.
    let readyz = readyz_naming(server.port, "openapi old");
    assert_eq!(
        (readyz.status, readyz.body.as_str()),
        (
            200,
            // Host folders are never shown: the file's name is.
            "ready\nplugins left out:\n  openapi old: spec old.json: Swagger 2.0 is not supported: convert it to OpenAPI 3 (e.g. with swagger2openapi)\n"
        )
    );
    assert_eq!(
        execute_on(server.port, "def main():\n    return slowshop.slow()"),
        Err("capability failed: slowshop.slow timed out".to_owned())
    );
    // Refused by its Content-Length, and while it streams without one.
    for big in ["big", "big_stream"] {
        assert_eq!(
            execute_on(
                server.port,
                &format!("def main():\n    return shop.{big}()")
            ),
            Err("capability failed: openapi shop sent an answer over 16 MiB".to_owned())
        );
    }
    // 1,100,000 values (3.3 MB) are counted, not built: past the result's
    // budget (--max-value-bytes, 1 MiB).
    let many = execute_on(server.port, "def main():\n    return shop.many()");
    assert_eq!(
        many.as_ref().map(|value| value.to_string().len()),
        Err(&"resource limit exceeded".to_owned())
    );
    // The server, and the service, serve on; so does the YAML spec's.
    assert_eq!(
        execute_on(
            server.port,
            "def main():\n    return [shop.read_item(item_id=1)[\"name\"], yamlshop.read_item(item_id=2)[\"name\"]]"
        ),
        Ok(json!(["hammer", "nails"]))
    );
}

#[test]
fn a_spec_and_a_service_over_https_are_trusted_through_the_system_roots() {
    let dir = root().join("target/e2e-openapi/https");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plugins")).expect("create the folders");
    // A certificate for 127.0.0.1, self-signed by openssl: an organization's
    // own CA, as far as the server knows.
    let (cert, key) = crate::support::loopback_certificate(&dir);
    let shop = Shop::start_with(&[std::path::Path::new("--tls"), &cert, &key]);
    let spec = format!("https://127.0.0.1:{}/openapi.json", shop.port);
    let path = dir.join("codemode.toml");
    std::fs::write(
        &path,
        format!(
            "plugins = \"plugins\"\n\n[[openapi]]\nname = \"shop\"\nspec = \"{spec}\"\napi-key-header = \"X-API-Key\"\napi-key-env = \"SHOP_KEY\"\ninclude = [\"readItem\"]\n"
        ),
    )
    .expect("write the config");
    let args = ["--config", path.to_str().expect("utf-8"), "--allow-all"];
    // The system's roots, as rustls-native-certs reads them: SSL_CERT_FILE.
    let trusting = HttpServer::start_with_env(
        &args,
        &[
            ("SHOP_KEY", "shop-key"),
            ("SSL_CERT_FILE", cert.to_str().expect("utf-8")),
        ],
    );
    assert_eq!(
        execute_on(
            trusting.port,
            "def main():\n    return shop.read_item(item_id=1)[\"name\"]"
        ),
        Ok(json!("hammer"))
    );
    drop(trusting);
    let doubting = HttpServer::start_with_env(
        &args,
        &[
            ("SHOP_KEY", "shop-key"),
            (
                "SSL_CERT_FILE",
                root().join("Cargo.toml").to_str().expect("utf-8"),
            ),
        ],
    );
    wait_for_log(&doubting, "spec not loaded", 1);
    let readyz = readyz_naming(doubting.port, "openapi shop");
    assert_eq!(
        (readyz.status, readyz.body.as_str()),
        (
            200,
            format!(
                "ready\nplugins left out:\n  openapi shop: spec {spec}: GET failed: error sending request for url ({spec}): client error (Connect): invalid peer certificate: UnknownIssuer\n"
            )
            .as_str()
        )
    );
}

/// `/readyz` of the server on `port` once it names `needle` (a source left out
/// is offered after its failure is logged), within the tests' deadline.
fn readyz_naming(port: u16, needle: &str) -> crate::support::RawResponse {
    let mut last = raw_request(port, "GET", "/readyz", &[], "");
    wait_until(
        &format!("/readyz to name {needle}"),
        || {
            last = raw_request(port, "GET", "/readyz", &[], "");
            last.body.contains(needle)
        },
        String::new,
    );
    last
}

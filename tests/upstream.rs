//! Upstream MCP servers as capabilities, end to end: the real binary with a config
//! file naming real MCP servers as `[[upstream]]` children (PyPI `mcp-server-time`,
//! and `tests/upstreams/double.py`, which misbehaves on request), driven by the
//! Python MCP client.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::stdio::{call, err, ok};
use crate::support::{
    HttpServer, drive, drive_in, drive_with_env, example_plugins, execute_http, python,
    raw_request, root, startup_log, wait_for_audit, wait_for_log, wait_until,
};

/// The bin folder of [`devtools::UPSTREAM_PYTHON`], which holds the third-party
/// upstream servers (a venv of their own: their dependencies need not agree
/// with the client's).
pub(crate) fn upstream_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| crate::support::tool(&devtools::UPSTREAM_PYTHON).join("bin"))
}

/// A config file `codemode.toml` with `text` in a fresh folder of the test `label`.
fn config(label: &str, text: &str) -> PathBuf {
    let dir = root().join("target/e2e-upstream").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the config folder");
    let path = dir.join("codemode.toml");
    std::fs::write(&path, text).expect("write the config");
    path
}

/// A config `label` serving an empty plugins folder and the test upstream
/// `double` alone, and the file `double` logs to.
fn double_alone(label: &str) -> (PathBuf, PathBuf) {
    let log = root()
        .join("target/e2e-upstream")
        .join(label)
        .join("double.log");
    let path = config(
        label,
        &format!(
            "plugins = \"plugins\"\nallow-all = true\n\n[[upstream]]\nname = \"double\"\ncommand = [{:?}, {:?}]\nenv = {{ DOUBLE_LOG = {:?} }}\n",
            python().display().to_string(),
            root()
                .join("tests/upstreams/double.py")
                .display()
                .to_string(),
            log.display().to_string(),
        ),
    );
    let plugins = path.with_file_name("plugins");
    std::fs::create_dir_all(plugins).expect("create the plugins folder");
    (path, log)
}

/// The examples plus the time server as upstream `time`.
fn time_config(label: &str, extra: &str) -> PathBuf {
    config(
        label,
        &format!(
            "plugins = {:?}\n\n[[upstream]]\nname = \"time\"\ncommand = [{:?}]\ntimeout = \"20s\"\n{extra}",
            example_plugins().display().to_string(),
            upstream_bin().join("mcp-server-time").display().to_string(),
        ),
    )
}

fn execute(source: &str) -> Value {
    call("execute", json!({ "source": source }))
}

/// `step` repeated until it succeeds, for at most 30 s.
fn until(mut step: Value) -> Value {
    step["op"] = json!("call_until");
    step["seconds"] = json!(30);
    step
}

fn main_returning(body: &str) -> Value {
    execute(&format!("def main():\n    return {body}"))
}

#[test]
fn upstream_tools_are_found_described_and_called_beside_plugins() {
    let path = time_config("time", "");
    let out = drive(
        &["--config", path.to_str().expect("utf-8")],
        json!([
            call("search_api", json!({"query": "current time in a timezone"})),
            call("describe_api", json!({"name": "time.convert_time"})),
            execute(
                "def main():\n    book = records.lookup(key=\"bk-0042\")\n    t = time.convert_time(source_timezone=\"Etc/UTC\", time=\"12:00\", target_timezone=\"Asia/Tokyo\")\n    return {\"key\": book[\"key\"], \"tokyo\": t[\"target\"][\"datetime\"][11:16], \"diff\": t[\"time_difference\"], \"zone\": t[\"target\"][\"timezone\"], \"dst\": t[\"target\"][\"is_dst\"]}"
            ),
            main_returning("time.get_current_time(zone=\"UTC\")"),
            main_returning("time.get_current_time()"),
            main_returning("time.get_current_time(timezone=5)"),
            main_returning("time.get_current_time(timezone=\"Not/AZone\")"),
            main_returning("time.get_current_time(\"UTC\")"),
        ]),
    );
    let results = &out["results"];
    let found = ok(&results[0]);
    assert_eq!(
        found["results"][0]["name"], "time.get_current_time",
        "{found}"
    );
    let timezone_record = "{timezone: str, datetime: str, day_of_week: str, is_dst: bool}";
    assert_eq!(
        ok(&results[1]),
        &json!({
            "name": "time.convert_time",
            "signature": "time.convert_time(*, source_timezone: str, time: str, target_timezone: str)",
            "summary": "Convert time between timezones",
            "description": "Convert time between timezones\n\nArguments:\n\
                - source_timezone: Source IANA timezone name (e.g., 'America/New_York', 'Europe/London'). Use 'Etc/UTC' as local timezone if no source timezone provided by the user.\n\
                - time: Time to convert in 24-hour format (HH:MM)\n\
                - target_timezone: Target IANA timezone name (e.g., 'Asia/Tokyo', 'America/San_Francisco'). Use 'Etc/UTC' as local timezone if no target timezone provided by the user.",
            "input": [
                {"name": "source_timezone", "type": "str", "required": true},
                {"name": "time", "type": "str", "required": true},
                {"name": "target_timezone", "type": "str", "required": true},
            ],
            "output": [
                {"name": "source", "type": timezone_record, "required": true},
                {"name": "target", "type": timezone_record, "required": true},
                {"name": "time_difference", "type": "str", "required": true},
            ],
        })
    );
    assert_eq!(
        ok(&results[2])["result"],
        json!({"key": "bk-0042", "tokyo": "21:00", "diff": "+9.0h", "zone": "Asia/Tokyo", "dst": false})
    );
    assert_eq!(
        results[2]["meta"]["codemode/stats"]["native_calls"],
        json!(2),
        "{}",
        results[2]
    );
    let failures: Vec<&str> = (3..8).map(|i| err(&results[i])).collect();
    assert_eq!(
        failures,
        [
            "invalid capability arguments: unknown argument \"zone\"",
            "invalid capability arguments: missing required argument \"timezone\"",
            "invalid capability arguments: argument \"timezone\" must be a string",
            "capability failed: Error executing tool get_current_time: Invalid timezone: 'No time zone found with key Not/AZone'",
            "invalid capability arguments: positional arguments are not accepted",
        ]
    );
}

#[test]
fn the_allow_list_and_disable_remove_upstream_tools() {
    let path = time_config("allow", "tools = [\"convert_time\", \"no_such_tool\"]\n");
    let out = drive(
        &["--config", path.to_str().expect("utf-8")],
        json!([
            call("describe_api", json!({"name": "time.get_current_time"})),
            call("describe_api", json!({"name": "time.convert_time"})),
        ]),
    );
    assert_eq!(err(&out["results"][0]), "capability not found");
    assert_eq!(ok(&out["results"][1])["name"], "time.convert_time");
    let path = time_config("disable", "");
    let out = drive(
        &[
            "--config",
            path.to_str().expect("utf-8"),
            "--disable",
            "mcp:time/convert_time",
        ],
        json!([
            call("describe_api", json!({"name": "time.convert_time"})),
            call("describe_api", json!({"name": "time.get_current_time"})),
        ]),
    );
    assert_eq!(err(&out["results"][0]), "capability not found");
    assert_eq!(
        ok(&out["results"][1])["signature"],
        "time.get_current_time(*, timezone: str)"
    );
}

#[test]
fn a_misbehaving_upstream_stays_contained() {
    let dir = root().join("target/e2e-upstream/double");
    let log = dir.join("double.log");
    let hold = dir.join("double.hold");
    let _ = std::fs::remove_file(&hold);
    let double = root().join("tests/upstreams/double.py");
    let upstream = |name: &str, timeout: &str| {
        format!(
            "[[upstream]]\nname = {name:?}\ncommand = [{:?}, {:?}]\nenv = {{ DOUBLE_LOG = {:?}, DOUBLE_HOLD = {:?} }}\ntimeout = {timeout:?}\n",
            python().display().to_string(),
            double.display().to_string(),
            log.display().to_string(),
            hold.display().to_string(),
        )
    };
    let path = config(
        "double",
        &format!(
            "plugins = \"plugins\"\nmax-execution-time = \"3s\"\n\n{}\n{}",
            upstream("double", "30s"),
            upstream("quick", "500ms")
        ),
    );
    // No plugins: the upstreams are all it serves.
    std::fs::create_dir_all(dir.join("plugins")).expect("create the plugins folder");
    let out = drive_with_env(
        &["--config", path.to_str().expect("utf-8")],
        &json!({"CODEMODE_TEST_SECRET": "s3cret"}),
        json!([
            main_returning(
                "[double.env(name=n)[\"result\"] for n in [\"DOUBLE_LOG\", \"CODEMODE_TEST_SECRET\"]]"
            ),
            main_returning("double.env(name=\"PATH\")[\"result\"] != \"<unset>\""),
            main_returning("double.wait(seconds=30)"),
            main_returning("quick.wait(seconds=30)"),
            main_returning("double.wait(seconds=0)"),
            main_returning("double.refuse(reason=\"no\\tway\")"),
            main_returning("double.list_files(pattern=\"*.rs\", limit=2)"),
            call("describe_api", json!({"name": "double.list_files"})),
            main_returning("double.crash()"),
            until(main_returning(
                "double.env(name=\"PATH\")[\"result\"] != \"<unset>\""
            )),
            main_returning("double.grow()"),
            until(call("describe_api", json!({"name": "double.extra"}))),
            main_returning("double.extra()"),
            main_returning("quick.huge()"),
            main_returning("quick.wait(seconds=0)"),
            // Down for its next two starts (1 s, then 2 s of backoff): its names
            // stay, its calls fail at once.
            main_returning("double.crash_and_stay_down(starts=2)"),
            call("describe_api", json!({"name": "double.env"})),
            main_returning("double.env(name=\"PATH\")"),
            until(main_returning(
                "double.env(name=\"PATH\")[\"result\"] != \"<unset>\""
            )),
        ]),
    );

    let results = &out["results"];
    assert_eq!(
        ok(&results[0])["result"],
        json!([log.display().to_string(), "<unset>"]),
        "the child sees its env, PATH and HOME, nothing else of the host's"
    );
    assert_eq!(ok(&results[1])["result"], json!(true));
    assert_eq!(err(&results[2]), "resource limit exceeded");
    assert_eq!(
        results[2]["meta"]["codemode/stats"]["limit"],
        "--max-execution-time"
    );
    assert_eq!(err(&results[3]), "capability failed: quick.wait timed out");
    assert_eq!(
        ok(&results[4])["result"],
        json!({"result": "done"}),
        "the upstream still serves after a call was abandoned"
    );
    assert_eq!(
        err(&results[5]),
        "capability failed: Error executing tool refuse: no way",
        "the tool's text, its tab made a space"
    );
    assert_eq!(ok(&results[6])["result"], json!({"result": "*.rs 2 file"}));
    assert_eq!(
        ok(&results[7])["signature"],
        "double.list_files(*, pattern: str, limit: int | None, kind: str | None)"
    );
    assert_eq!(
        err(&results[8]),
        "capability failed: upstream double is unavailable"
    );
    assert_eq!(
        ok(&results[9])["result"],
        json!(true),
        "the child is started again and serves"
    );
    assert_eq!(ok(&results[10])["result"], json!({"result": "grown"}));
    assert_eq!(
        ok(&results[11])["signature"],
        "double.extra()",
        "a tool added upstream becomes a capability"
    );
    assert_eq!(ok(&results[12])["result"], json!({"result": "extra"}));
    // A number no float holds: rmcp cannot decode the answer and drops it, so the
    // call ends at the upstream's timeout (the execution's, without one), and the
    // session goes on.
    assert_eq!(err(&results[13]), "capability failed: quick.huge timed out");
    assert_eq!(ok(&results[14])["result"], json!({"result": "done"}));
    assert_eq!(
        err(&results[15]),
        "capability failed: upstream double is unavailable"
    );
    assert_eq!(
        ok(&results[16])["signature"],
        "double.env(*, name: str)",
        "a restarting upstream keeps its names"
    );
    assert_eq!(
        err(&results[17]),
        "capability failed: upstream double is unavailable",
        "a call while it is down fails as unavailable, never as an unknown name"
    );
    assert_eq!(ok(&results[18])["result"], json!(true), "and it is back");
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        log_text.matches("started ").count(),
        4,
        "double, quick, double once more, and after two held starts: {log_text}"
    );
    assert_eq!(log_text.matches("held").count(), 2, "{log_text}");
    // Both abandoned waits were cancelled upstream, not left running.
    wait_until(
        "the upstreams to log both cancellations",
        || {
            std::fs::read_to_string(&log)
                .is_ok_and(|text| text.matches("cancelled wait 30").count() == 2)
        },
        || std::fs::read_to_string(&log).unwrap_or_default(),
    );
}

#[test]
fn no_upstream_child_outlives_the_server() {
    let (path, log) = double_alone("shutdown");
    let server = HttpServer::start(&["--config", path.to_str().expect("utf-8")]);
    // It connects after the server is ready.
    crate::support::wait_for_log(&server, "catalog updated for an upstream", 1);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let pid: u32 = text
        .lines()
        .find_map(|line| line.strip_prefix("started ")?.parse().ok())
        .unwrap_or_else(|| panic!("the double logged no pid: {text}"));
    // Running: its /proc entry exists and is not a zombie's.
    let metrics = raw_request(server.port, "GET", "/metrics", &[], "");
    assert!(
        metrics
            .body
            .lines()
            .any(|l| l == "codemode_upstream_up{upstream=\"double\"} 1"),
        "{}",
        metrics.body
    );
    let alive = move || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(") ")
                .next()
                .is_some_and(|rest| !rest.starts_with('Z'))
        })
    };
    assert!(alive(), "the child runs while the server serves");
    server.terminate();
    let (code, server_log) = server.wait();
    assert_eq!(code, Some(0), "{server_log}");
    wait_until(
        "the upstream child to exit",
        || !alive(),
        || server_log.clone(),
    );
}

#[test]
fn a_policy_decides_upstream_calls_by_their_ids() {
    let dir = root().join("target/e2e-upstream/policy");
    let path = config(
        "policy",
        &format!(
            "plugins = {:?}\npolicy = [\"deny.rego\"]\naudit-log = \"audit.log\"\n\n[[upstream]]\nname = \"time\"\ncommand = [{:?}]\n",
            example_plugins().display().to_string(),
            upstream_bin().join("mcp-server-time").display().to_string(),
        ),
    );
    std::fs::write(
        dir.join("deny.rego"),
        "package codemode.authz\n\ndefault allow := false\n\nallow if input.capability.id != \"mcp:time/convert_time\"\n",
    )
    .expect("write the policy");
    let out = drive(
        &["--config", path.to_str().expect("utf-8")],
        json!([
            main_returning("time.get_current_time(timezone=\"Etc/UTC\")[\"timezone\"]"),
            main_returning(
                "time.convert_time(source_timezone=\"Etc/UTC\", time=\"12:00\", target_timezone=\"Asia/Tokyo\")"
            ),
        ]),
    );
    assert_eq!(ok(&out["results"][0])["result"], json!("Etc/UTC"));
    assert_eq!(err(&out["results"][1]), "permission denied");
    let audit = std::fs::read_to_string(dir.join("audit.log")).expect("the audit log");
    let lines: Vec<Value> = audit
        .lines()
        .map(|line| serde_json::from_str(line).expect("an audit line is JSON"))
        .collect();
    let seen: Vec<(&str, &str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["capability_id"].as_str().unwrap_or_default(),
                l["decision"].as_str().unwrap_or_default(),
                l["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("mcp:time/get_current_time", "allow", "ok"),
            ("mcp:time/convert_time", "deny", "permission denied"),
        ]
    );
}

/// A git repository with one commit, made for the test `label`.
pub(crate) fn git_repository(label: &str) -> PathBuf {
    let repo = root()
        .join("target/e2e-upstream")
        .join(format!("{label}-repo"));
    let _ = std::fs::remove_dir_all(&repo);
    std::fs::create_dir_all(&repo).expect("create the repository folder");
    std::fs::write(repo.join("notes.txt"), "first\n").expect("write a file");
    for args in [
        &["init", "-q"][..],
        &["add", "notes.txt"],
        &[
            "-c",
            "user.name=Tester",
            "-c",
            "user.email=tester@example.com",
            "commit",
            "-q",
            "-m",
            "Add the first notes",
        ],
    ] {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(&repo)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "git {args:?} failed in {}", repo.display());
    }
    repo
}

#[test]
fn third_party_servers_combine_with_plugins_in_one_program() {
    let repo = git_repository("combine");
    let node = crate::support::node_tools();
    let bin = upstream_bin();
    let path = config(
        "combine",
        &format!(
            "plugins = {plugins:?}\n\n\
             [[upstream]]\nname = \"time\"\ncommand = [{time:?}]\n\n\
             [[upstream]]\nname = \"git\"\ncommand = [{git:?}, \"--repository\", {repo:?}]\n\n\
             [[upstream]]\nname = \"everything\"\ncommand = [{node:?}, {everything:?}, \"stdio\"]\n",
            plugins = example_plugins().display().to_string(),
            time = bin.join("mcp-server-time").display().to_string(),
            git = bin.join("mcp-server-git").display().to_string(),
            repo = repo.display().to_string(),
            node = node.node.display().to_string(),
            everything = node.everything.display().to_string(),
        ),
    );
    let repo_path = repo.display().to_string();
    let out = drive(
        &[
            "--config",
            path.to_str().expect("utf-8"),
            "--disable",
            "mcp:git/git_commit",
        ],
        json!([
            execute(&format!(
                "def main():\n    book = records.lookup(key=\"bk-0042\")\n    t = time.convert_time(source_timezone=\"Etc/UTC\", time=\"08:30\", target_timezone=\"Asia/Tokyo\")\n    log = git.git_log(repo_path={repo_path:?}, max_count=1)\n    return {{\"key\": book[\"key\"], \"tokyo\": t[\"target\"][\"datetime\"][11:16], \"latest\": [l for l in log[\"text\"].splitlines() if l.startswith(\"Message:\")]}}"
            )),
            call("describe_api", json!({"name": "git.git_commit"})),
            call(
                "describe_api",
                json!({"name": "everything.get_structured_content"})
            ),
            call(
                "describe_api",
                json!({"name": "everything.get_annotated_message"})
            ),
            main_returning("everything.get_sum(a=2, b=3.5)"),
            main_returning(
                "everything.get_structured_content(location=\"Chicago\")[\"conditions\"] != None"
            ),
            main_returning("everything.get_structured_content(location=\"Paris\")"),
            main_returning("everything.get_sum(a=1, b=float(\"inf\"))"),
            main_returning("everything.get_sum(a=1, b=99999999999999999999)"),
            call("search_api", json!({"query": "structured content"})),
            main_returning(
                "[[c[\"type\"], c[\"mime_type\"], len(c[\"data\"]) > 1000, c[\"data\"][:8]] for c in everything.get_tiny_image()[\"content\"]] + [everything.get_tiny_image()[\"text\"]]"
            ),
            main_returning(
                "[[c[\"type\"], c[\"uri\"], c[\"name\"], c[\"mime_type\"]] for c in everything.get_resource_links(count=2)[\"content\"]]"
            ),
            execute(
                "def main():\n    r = everything.get_resource_reference(resourceType=\"Text\", resourceId=3)[\"content\"][0]\n    return [sorted(r.keys()), r[\"type\"], r[\"uri\"], r[\"mime_type\"], r[\"text\"].startswith(\"Resource 3: This is a plaintext resource\")]"
            ),
            call("describe_api", json!({"name": "everything.get_tiny_image"})),
            call("describe_api", json!({"name": "time.convert_time"})),
            call("describe_api", json!({"name": "git.git_log"})),
            call("search_api", json!({"query": "HH:MM"})),
        ]),
    );
    let results = &out["results"];
    assert_eq!(
        ok(&results[0])["result"],
        json!({"key": "bk-0042", "tokyo": "17:30", "latest": ["Message: Add the first notes"]})
    );
    assert_eq!(err(&results[1]), "capability not found");
    let structured = ok(&results[2]);
    assert_eq!(
        structured["signature"],
        "everything.get_structured_content(*, location: \"New York\" | \"Chicago\" | \"Los Angeles\")"
    );
    assert_eq!(
        structured["output"],
        json!([
            {"name": "temperature", "type": "float", "required": true},
            {"name": "conditions", "type": "str", "required": true},
            {"name": "humidity", "type": "float", "required": true},
        ])
    );
    assert_eq!(
        ok(&results[3])["signature"],
        "everything.get_annotated_message(*, messageType: \"error\" | \"success\" | \"debug\", includeImage: bool | None)"
    );
    assert_eq!(
        ok(&results[4])["result"],
        json!({"content": [], "text": "The sum of 2 and 3.5 is 5.5."})
    );
    assert_eq!(ok(&results[5])["result"], json!(true));
    let failures: Vec<&str> = (6..9).map(|i| err(&results[i])).collect();
    assert_eq!(
        failures,
        [
            "invalid capability arguments: argument \"location\" must be one of \"New York\", \"Chicago\", \"Los Angeles\"",
            "invalid capability arguments: argument \"b\" is not finite",
            "invalid capability arguments: argument \"b\" overflows int64",
        ]
    );
    let found: Vec<&str> = ok(&results[9])["results"]
        .as_array()
        .map(|r| r.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        found.first(),
        Some(&"everything.get_structured_content"),
        "{found:?}"
    );
    // Content other than text reaches the program, listed in order.
    assert_eq!(
        ok(&results[10])["result"],
        json!([
            ["image", "image/png", true, "iVBORw0K"],
            "Here's the image you requested:\nThe image above is the MCP logo."
        ])
    );
    assert_eq!(
        ok(&results[11])["result"],
        json!([
            [
                "resource_link",
                "demo://resource/dynamic/blob/1",
                "Blob Resource 1",
                "text/plain"
            ],
            [
                "resource_link",
                "demo://resource/dynamic/text/2",
                "Text Resource 2",
                "text/plain"
            ]
        ])
    );
    assert_eq!(
        ok(&results[12])["result"],
        json!([
            ["mime_type", "text", "type", "uri"],
            "resource",
            "demo://resource/dynamic/text/3",
            "text/plain",
            true
        ])
    );
    assert_eq!(
        ok(&results[13])["output"],
        json!([
            {"name": "content", "type": "list[dict[str, str]]", "required": true},
            {"name": "text", "type": "str", "required": true},
        ])
    );
    // What the schemas say beyond types, in the tools' own parameter order.
    assert_eq!(
        ok(&results[14])["description"],
        "Convert time between timezones\n\nArguments:\n\
         - source_timezone: Source IANA timezone name (e.g., 'America/New_York', 'Europe/London'). Use 'Etc/UTC' as local timezone if no source timezone provided by the user.\n\
         - time: Time to convert in 24-hour format (HH:MM)\n\
         - target_timezone: Target IANA timezone name (e.g., 'Asia/Tokyo', 'America/San_Francisco'). Use 'Etc/UTC' as local timezone if no target timezone provided by the user."
    );
    assert_eq!(
        ok(&results[15])["signature"],
        "git.git_log(*, repo_path: str, max_count: int | None, start_timestamp: str | None, end_timestamp: str | None)"
    );
    let log = ok(&results[15])["description"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        log.starts_with("Shows the commit logs\n\nArguments:\n- max_count: default: 10\n- start_timestamp: Start timestamp for filtering commits."),
        "{log}"
    );
    // Search finds a tool by the words of its parameters' documentation too.
    assert_eq!(
        ok(&results[16])["results"],
        json!([{
            "name": "time.convert_time",
            "signature": "time.convert_time(*, source_timezone: str, time: str, target_timezone: str)",
            "summary": "Convert time between timezones"
        }])
    );
}

#[test]
fn a_streamable_http_upstream_is_reached_with_its_bearer_token() {
    let dir = root().join("target/e2e-upstream/http");
    let path = config("http", "");
    let tokens = dir.join("inner.tokens");
    std::fs::write(
        &tokens,
        format!(
            "gateway {}\n",
            codemode_server::authz::token_hash("inner-secret")
        ),
    )
    .expect("write the tokens file");
    let examples = example_plugins();
    let inner = HttpServer::allowing(&examples, &["--tokens", tokens.to_str().expect("utf-8")]);
    std::fs::write(
        &path,
        format!(
            "plugins = \"plugins\"\n\n[[upstream]]\nname = \"inner\"\nurl = \"{}\"\nbearer-token-env = \"INNER_TOKEN\"\nheaders = {{ \"X-Org\" = \"acme\" }}\ntimeout = \"20s\"\n",
            inner.url()
        ),
    )
    .expect("write the config");
    std::fs::create_dir_all(dir.join("plugins")).expect("create the plugins folder");
    let out = drive_with_env(
        &["--config", path.to_str().expect("utf-8")],
        &json!({"INNER_TOKEN": "inner-secret"}),
        json!([
            call("describe_api", json!({"name": "inner.execute"})),
            main_returning(
                "inner.execute(source=\"def main():\\n    return records.lookup(key='bk-0042')['key']\")"
            ),
        ]),
    );
    let described = ok(&out["results"][0]);
    assert_eq!(
        described["signature"], "inner.execute(*, source: str)",
        "{described}"
    );
    let result = &ok(&out["results"][1])["result"];
    assert_eq!(result["result"], json!("bk-0042"), "{result}");
    // The inner server saw the gateway's token: its subject is in its audit log.
    wait_for_audit(&inner, "\"subject\":\"gateway\"", 1);
}

/// The runnable config of the README's section "Existing MCP servers": its first
/// TOML block.
fn readme_gateway_config() -> String {
    let readme = include_str!("../README.md");
    let section = readme
        .split("## Existing MCP servers")
        .nth(1)
        .expect("the README has the section");
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the section has a TOML block");
    block.to_owned()
}

#[test]
fn the_readme_gateway_example_works_with_the_python_client_and_the_inspector() {
    let path = config("readme", &readme_gateway_config());
    let dir = path.parent().expect("a folder").to_path_buf();
    std::os::unix::fs::symlink(example_plugins(), dir.join("plugins")).expect("link the plugins");
    let repo = git_repository("readme");
    std::fs::rename(&repo, dir.join("repo")).expect("move the repository in place");
    let search_path = format!(
        "{}:{}",
        upstream_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let program = "def main():\n    book = records.lookup(key=\"bk-0042\")\n    t = time.convert_time(source_timezone=\"Etc/UTC\", time=\"06:00\", target_timezone=\"Asia/Tokyo\")\n    log = git.git_log(repo_path=\".\", max_count=1)\n    return [book[\"key\"], t[\"target\"][\"datetime\"][11:16], \"Add the first notes\" in log[\"text\"]]";
    let out = drive_with_env(
        &["--config", path.to_str().expect("utf-8")],
        &json!({"PATH": search_path}),
        json!([execute(program)]),
    );
    assert_eq!(
        ok(&out["results"][0])["result"],
        json!(["bk-0042", "15:00", true])
    );
    let node = crate::support::node_tools();
    let inspected = std::process::Command::new(&node.node)
        .arg(&node.inspector)
        .args(["--cli", "--format", "json", "-q", "-e"])
        .arg(format!("PATH={search_path}"))
        .args([
            "--method",
            "tools/call",
            "--tool-name",
            "execute",
            "--tool-arg",
        ])
        .arg(format!("source={program}"))
        .arg("--")
        .arg(crate::support::host_bin())
        .args(["--config", path.to_str().expect("utf-8")])
        .args(["--cache-dir", crate::support::cache_dir()])
        .output()
        .expect("run the MCP Inspector");
    let printed = String::from_utf8_lossy(&inspected.stdout);
    assert!(
        inspected.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&inspected.stderr)
    );
    let answer: Value = serde_json::from_str(&printed).expect("the Inspector prints JSON");
    assert_eq!(
        answer["result"]["structuredContent"]["result"],
        json!(["bk-0042", "15:00", true]),
        "{answer}"
    );
}

#[test]
fn a_gateway_of_upstreams_alone_needs_no_plugins_folder() {
    // No `plugins` key, and no ./plugins where the server starts.
    let path = config(
        "gateway-only",
        &format!(
            "[[upstream]]\nname = \"time\"\ncommand = [{:?}]\ntimeout = \"20s\"\n",
            upstream_bin().join("mcp-server-time").display().to_string(),
        ),
    );
    let cwd = path.parent().expect("the config's folder").join("cwd");
    std::fs::create_dir_all(&cwd).expect("create the server's folder");
    let out = drive_in(
        &cwd,
        &["--config", path.to_str().expect("utf-8")],
        json!([main_returning(
            "time.convert_time(source_timezone=\"Etc/UTC\", time=\"12:00\", target_timezone=\"Asia/Tokyo\")[\"target\"][\"datetime\"][11:16]"
        )]),
    );
    assert_eq!(ok(&out["results"][0])["result"], json!("21:00"));
    // A folder named explicitly must exist, as before.
    let (code, stderr) = {
        let out = std::process::Command::new(crate::support::host_bin())
            .current_dir(&cwd)
            .args([
                "--config",
                path.to_str().expect("utf-8"),
                "--plugins",
                "mine",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run codemode-host");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("plugins folder `mine`: No such file or directory (os error 2)"),
        "{stderr}"
    );
}

#[test]
fn disabling_an_upstream_id_needs_it_configured_not_up_and_readyz_names_it_down() {
    // An upstream that cannot start: its IDs may be disabled all the same.
    let down = config(
        "disable-down",
        &format!(
            "plugins = {:?}\n\n[[upstream]]\nname = \"gone\"\ncommand = [\"/nonexistent/gone\"]\n",
            example_plugins().display().to_string(),
        ),
    );
    let down = down.to_str().expect("utf-8");
    let (log, code) = startup_log(&["--config", down, "--disable", "mcp:gone/anything"]);
    let log = log.join("\n");
    assert!(log.contains("catalog ready"), "{log}");
    assert_eq!(code, Some(0), "{log}");
    // /readyz says which upstreams are down.
    let server = HttpServer::start(&["--config", down, "--allow-all"]);
    let readyz = raw_request(server.port, "GET", "/readyz", &[], "");
    assert_eq!(
        (readyz.status, readyz.body.as_str()),
        (200, "ready\nupstreams down:\n  gone\n")
    );
    drop(server);

    // An ID of an upstream nobody configured names nothing, whatever serves.
    let (log, code) = startup_log(&["--config", down, "--disable", "mcp:nope/x"]);
    let log = log.join("\n");
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("unknown disabled capability ID \"mcp:nope/x\""),
        "{log}"
    );

    // A configured upstream without that tool: a WARN when it lists its tools
    // (after the server is ready: nothing waits for an upstream's first list).
    let time = time_config("disable-unknown-tool", "");
    let server = HttpServer::start(&[
        "--config",
        time.to_str().expect("utf-8"),
        "--disable",
        "mcp:time/no_such_tool",
        "--allow-all",
    ]);
    wait_for_log(
        &server,
        "WARN codemode_server::registry::slot: a disabled capability ID names none of its tools provider=upstream time id=mcp:time/no_such_tool",
        1,
    );
    let log = server.log();
    assert!(
        log.contains("WARN codemode_server::service: an upstream's timeout is above --max-execution-time, which ends its calls first (in a task, --max-task-time does) upstream=time timeout=20s max_execution_time=5s"),
        "the time config's 20 s timeout against the default 5 s budget: {log}"
    );
}

#[test]
fn the_config_file_reloads_upstreams_and_limits_while_serving_and_a_bad_one_changes_nothing() {
    let dir = root().join("target/e2e-upstream/reconfig");
    let log = dir.join("double.log");
    let double = root().join("tests/upstreams/double.py");
    let upstream = |name: &str, timeout: &str| {
        format!(
            "[[upstream]]\nname = {name:?}\ncommand = [{:?}, {:?}]\nenv = {{ DOUBLE_LOG = {:?} }}\ntimeout = {timeout:?}\n",
            python().display().to_string(),
            double.display().to_string(),
            log.display().to_string(),
        )
    };
    let settings = |calls: u32, memory: &str, extra: &str, upstreams: &str| {
        format!(
            "plugins = {:?}\nmax-native-calls = {calls}\nmax-memory = {memory:?}\n{extra}\n{upstreams}",
            example_plugins().display().to_string(),
        )
    };
    let path = config(
        "reconfig",
        &settings(100, "64MiB", "", &upstream("alpha", "2s")),
    );
    // Replaced the way editors and config managers do: renamed over it.
    let rewrite = |text: &str| {
        let temp = path.with_extension("new");
        std::fs::write(&temp, text).expect("write the new config");
        std::fs::rename(&temp, &path).expect("rename it in place");
    };
    let server = HttpServer::start(&["--allow-all", "--config", path.to_str().expect("utf-8")]);
    let port = server.port;
    let files = |name: &str| {
        execute_http(
            port,
            &format!(
                "def main():\n    return {name}.list_files(pattern=\"*.rs\", limit=2)[\"result\"]"
            ),
        )
    };
    let two_calls = "def main():\n    return [records.lookup(key=\"bk-0001\")[\"key\"], records.lookup(key=\"bk-0002\")[\"key\"]]";
    wait_until(
        "upstream alpha to serve",
        || files("alpha") == Ok(json!("*.rs 2 file")),
        || server.log(),
    );
    assert_eq!(
        execute_http(port, two_calls),
        Ok(json!(["bk-0001", "bk-0002"]))
    );

    // alpha goes, beta comes with one of its tools disabled, one native call per
    // execution from now on, and a memory cap and a switch that need a restart.
    let disable = "disable = [\"mcp:beta/refuse\"]\nno-watch = true\n";
    rewrite(&settings(1, "128MiB", disable, &upstream("beta", "2s")));
    wait_for_log(
        &server,
        "limits=\"changed\" disabled=1 upstreams_added=beta upstreams_removed=alpha upstreams_restarted=",
        1,
    );
    wait_until(
        "upstream beta to serve",
        || files("beta") == Ok(json!("*.rs 2 file")),
        || server.log(),
    );
    assert_eq!(
        files("alpha"),
        Err("invalid program: <codemode>:2:12: Variable `alpha` not found".to_owned())
    );
    assert_eq!(
        execute_http(port, two_calls),
        Err("resource limit exceeded".to_owned())
    );
    assert_eq!(
        execute_http(port, "def main():\n    return beta.refuse(reason=\"x\")"),
        Err("invalid program: runtime error at <codemode>:2:12: unknown capability `beta.refuse` (find names with search_api)".to_owned())
    );
    let log = server.log();
    for key in ["max-memory", "no-watch"] {
        assert!(
            log.contains(&format!(
                "WARN codemode_host::reconfig: a config file setting changed that needs a restart; it keeps its value until then file={} key={key} cause=\"file changed\"",
                path.display()
            )),
            "{key}: {log}"
        );
    }
    assert!(!log.contains("key=max-total-memory"), "{log}");

    // beta configured differently: restarted. A file that does not parse changes
    // nothing, on a change as on SIGHUP.
    rewrite(&settings(1, "128MiB", disable, &upstream("beta", "3s")));
    wait_for_log(
        &server,
        "limits=\"unchanged\" disabled=1 upstreams_added= upstreams_removed= upstreams_restarted=beta",
        1,
    );
    rewrite("plugins = [\n");
    let failed = |cause: &str| {
        format!(
            "ERROR codemode_host::reconfig: config reload failed; the settings in force stay file={0} reason=config file `{0}`, line 1: unclosed array, expected `]` cause=\"{cause}\"",
            path.display()
        )
    };
    wait_for_log(&server, &failed("file changed"), 1);
    server.signal("HUP");
    wait_for_log(&server, &failed("SIGHUP"), 1);
    wait_until(
        "restarted beta to serve",
        || files("beta") == Ok(json!("*.rs 2 file")),
        || server.log(),
    );
    assert_eq!(
        execute_http(port, two_calls),
        Err("resource limit exceeded".to_owned())
    );
    server.terminate();
    let (code, _) = server.wait();
    assert_eq!(code, Some(0));
}

/// Over stdio the upstreams start once a client speaks: a start without one
/// (stdin at its end, as `precompile`-like warm-ups do) starts no child and
/// still fills the cache.
#[test]
fn a_stdio_server_without_a_client_starts_no_upstream() {
    let (path, log) = double_alone("no-client");
    let out = std::process::Command::new(crate::support::host_bin())
        .args(crate::support::with_cache(&[
            "--config",
            path.to_str().expect("utf-8"),
        ]))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run codemode-host");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("stdin closed before a client initialized; exiting"),
        "{stderr}"
    );
    assert!(!stderr.contains("provider added"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap_or_default(),
        "",
        "the upstream started"
    );
}

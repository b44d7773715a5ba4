//! `execute` as a task (the MCP Tasks extension, 2026-07-28): a client that
//! declares the extension gets a handle at once and the result from `tasks/get`,
//! exactly what a direct call returns; it can cancel a running task; a task has
//! its own time budget; a subject sees only its own tasks; a client that does not
//! ask sees no change. Driven over Streamable HTTP with raw JSON-RPC, as the
//! 2026-07-28 revision's stateless requests are.

use serde_json::{Value, json};

use crate::support::{
    HttpServer, RedisServer, plugin_folder, raw_request, test_plugin, wait_for_audit, wait_for_log,
    wait_until,
};

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A nap of `ms` milliseconds in the sleepy plugin.
fn nap(ms: u64) -> String {
    format!("def main():\n    return sleepy.nap(ms={ms})")
}

fn server(label: &str, extra: &[&str]) -> HttpServer {
    let plugins = plugin_folder(label, &[test_plugin("sleepy")]);
    let mut args = vec![
        "--allow-all",
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    HttpServer::start(&args)
}

/// One 2026-07-28 request: `method` with `params`, its `_meta` saying the
/// revision and (with `declare`) the Tasks extension; `name` is the `Mcp-Name`
/// header (the tool, or the task ID). Returns the JSON-RPC answer.
fn rpc(
    server: &HttpServer,
    token: Option<&str>,
    method: &str,
    name: &str,
    mut params: Value,
    declare: bool,
) -> Value {
    let extensions = if declare {
        json!({ TASKS: {} })
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
        ("Mcp-Name", name),
    ];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    let answer = raw_request(server.port, "POST", "/mcp", &headers, &body.to_string());
    serde_json::from_str(&answer.body)
        .unwrap_or_else(|e| panic!("{e}: {} {}", answer.status, answer.body))
}

fn execute(server: &HttpServer, token: Option<&str>, source: &str, declare: bool) -> Value {
    rpc(
        server,
        token,
        "tools/call",
        "execute",
        json!({"name": "execute", "arguments": {"source": source}}),
        declare,
    )
}

fn get(server: &HttpServer, token: Option<&str>, id: &str) -> Value {
    rpc(server, token, "tasks/get", id, json!({"taskId": id}), true)
}

fn cancel(server: &HttpServer, token: Option<&str>, id: &str) -> Value {
    rpc(
        server,
        token,
        "tasks/cancel",
        id,
        json!({"taskId": id}),
        true,
    )
}

/// The task's ID from a `tools/call` answered with a task.
fn task_id(answer: &Value) -> String {
    assert_eq!(answer["result"]["resultType"], "task", "{answer}");
    answer["result"]["taskId"]
        .as_str()
        .expect("a task ID")
        .to_owned()
}

/// Polls `tasks/get` until the task's status is not `working`.
fn until_ended(server: &HttpServer, token: Option<&str>, id: &str) -> Value {
    let last = std::cell::RefCell::new(Value::Null);
    wait_until(
        "the task to end",
        || {
            *last.borrow_mut() = get(server, token, id);
            last.borrow()["result"]["status"] != "working"
        },
        || last.borrow().to_string(),
    );
    last.into_inner()
}

/// The answer to a task refused for `flag`: a tool error, at once.
fn assert_refused(answer: &Value, flag: &str) {
    let result = &answer["result"];
    assert_eq!(result["isError"], true, "{answer}");
    assert_eq!(result["content"][0]["text"], "resource limit exceeded");
    assert_eq!(result["_meta"]["codemode/stats"]["limit"], flag, "{answer}");
}

/// A direct `execute` of a 1 ms nap is served (not refused for a slot).
fn assert_a_direct_call_is_served(server: &HttpServer) {
    let direct = execute(server, None, &nap(1), false);
    assert_eq!(
        direct["result"]["structuredContent"],
        json!({"result": {"ms": 1}}),
        "{direct}"
    );
}

/// `tasks/cancel` of `id` as `token` is acknowledged.
fn assert_cancel_acknowledged(server: &HttpServer, token: Option<&str>, id: &str) {
    assert_eq!(
        cancel(server, token, id)["result"],
        json!({"resultType": "complete"})
    );
}

fn not_found() -> Value {
    json!({"code": -32602, "message": "Failed to retrieve task: Task not found"})
}

#[test]
fn a_task_answers_its_handle_at_once_and_then_what_a_direct_call_returns() {
    let server = server("tasks-result", &[]);
    let created = execute(&server, None, &nap(300), true);
    let id = task_id(&created);
    let handle = &created["result"];
    assert_eq!(id.len(), 32, "{handle}");
    assert_eq!(handle["status"], "working");
    // --max-task-time 5m and --task-ttl 10m by default.
    assert_eq!(handle["ttlMs"], 900_000);
    assert_eq!(handle["pollIntervalMs"], 1000);
    assert_eq!(handle["createdAt"], handle["lastUpdatedAt"]);
    for absent in ["result", "error", "inputRequests", "requestState"] {
        assert!(handle.get(absent).is_none(), "{absent} in {handle}");
    }
    let ended = until_ended(&server, None, &id);
    let task = &ended["result"];
    assert_eq!(task["resultType"], "complete");
    assert_eq!(task["status"], "completed");
    assert_eq!(task["taskId"], id.as_str());
    let mut direct = execute(&server, None, &nap(300), false)["result"].clone();
    let mut result = task["result"].clone();
    assert_eq!(result["structuredContent"], json!({"result": {"ms": 300}}));
    // The cost of the execution, as a direct call has it; only the time differs.
    let stats = &result["_meta"]["codemode/stats"];
    assert!(
        stats["elapsed_us"].as_u64().is_some_and(|us| us >= 300_000),
        "{result}"
    );
    for answer in [&mut result, &mut direct] {
        let stats = answer["_meta"]["codemode/stats"]
            .as_object_mut()
            .expect("stats");
        assert!(stats.remove("elapsed_us").is_some());
    }
    assert_eq!(result, direct);
    // Asked again: the same result.
    assert_eq!(get(&server, None, &id)["result"]["result"], task["result"]);
    assert_eq!(get(&server, None, "0123")["error"], not_found());
}

/// In the embedded store (a file: `--store`'s default), tasks outlive their
/// server: killed (SIGKILL) and started again on the same file, it answers
/// `tasks/get` for a task that ended before with its result, and for one that
/// was still running as failed, its server having stopped; cancelling that
/// one leaves it so, and another subject finds neither.
#[test]
fn in_the_file_store_tasks_outlive_a_restart() {
    let dir = crate::support::root().join("target/e2e-tasks/file-restart");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the folder");
    let tokens = tokens_file("file-restart");
    let store = dir.join("store.redb");
    let args = [
        "--store",
        store.to_str().expect("utf-8 path"),
        "--tokens",
        tokens.to_str().expect("utf-8 path"),
    ];
    let first = server("tasks-file-restart", &args);
    let ended = task_id(&execute(&first, Some("ada-secret"), &nap(1), true));
    let before = until_ended(&first, Some("ada-secret"), &ended);
    assert_eq!(before["result"]["status"], "completed", "{before}");
    let running = task_id(&execute(&first, Some("ada-secret"), &nap(60_000), true));
    drop(first);
    let second = server("tasks-file-restart", &args);
    let after = get(&second, Some("ada-secret"), &ended);
    assert_eq!(after["result"], before["result"]);
    let lost = get(&second, Some("ada-secret"), &running);
    assert_eq!(lost["result"]["status"], "failed", "{lost}");
    assert_eq!(
        lost["result"]["error"]["message"], "the server running this task stopped before it ended",
        "{lost}"
    );
    assert_cancel_acknowledged(&second, Some("ada-secret"), &running);
    assert_eq!(
        get(&second, Some("ada-secret"), &running)["result"],
        lost["result"]
    );
    for id in [&ended, &running] {
        assert_eq!(get(&second, Some("bob-secret"), id)["error"], not_found());
    }
}

#[test]
fn a_client_that_does_not_declare_the_extension_gets_a_direct_answer() {
    let server = server("tasks-direct", &[]);
    let direct = execute(&server, None, &nap(10), false);
    assert_eq!(direct["result"]["resultType"], "complete", "{direct}");
    assert_eq!(
        direct["result"]["structuredContent"],
        json!({"result": {"ms": 10}})
    );
    // Its tasks/* requests are refused for the missing capability.
    let refused = rpc(
        &server,
        None,
        "tasks/get",
        "x",
        json!({"taskId": "x"}),
        false,
    );
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    // Input errors are answered at once, as a tool error, never as a task.
    let bad = rpc(
        &server,
        None,
        "tools/call",
        "execute",
        json!({"name": "execute", "arguments": {"source": 7}}),
        true,
    );
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert_eq!(
        bad["result"]["content"][0]["text"],
        "execute: property \"source\" must be a string"
    );
}

#[test]
fn cancelling_a_task_stops_its_execution_and_an_ended_one_stays() {
    // One execution at a time: a task whose execution went on would hold it.
    let server = server("tasks-cancel", &["--max-concurrent-executions", "1"]);
    let source = "def main():\n    sleepy.nap(ms=1)\n    return sleepy.nap(ms=60000)";
    let id = task_id(&execute(&server, None, source, true));
    // Its first call ended: the long nap starts next.
    wait_for_audit(&server, "\"outcome\":\"ok\"", 1);
    assert_eq!(
        cancel(&server, None, &id),
        json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete"}})
    );
    let task = get(&server, None, &id);
    assert_eq!(task["result"]["status"], "cancelled", "{task}");
    assert!(task["result"].get("result").is_none(), "{task}");
    // The nap was abandoned: the one execution slot is free for a direct call
    // long before the nap would have ended (else it would wait out its 5 s).
    assert_a_direct_call_is_served(&server);
    // Cancelling again, or an ended task, only acknowledges.
    assert_cancel_acknowledged(&server, None, &id);
    let done = task_id(&execute(&server, None, &nap(1), true));
    until_ended(&server, None, &done);
    assert_cancel_acknowledged(&server, None, &done);
    assert_eq!(get(&server, None, &done)["result"]["status"], "completed");
    assert_eq!(cancel(&server, None, "nope")["error"], not_found());
}

#[test]
fn a_task_has_its_own_time_budget() {
    let server = server(
        "tasks-time",
        &["--max-execution-time", "300ms", "--max-task-time", "2s"],
    );
    // Longer than --max-execution-time: a direct call runs out, a task does not.
    let direct = execute(&server, None, &nap(600), false);
    assert_eq!(direct["result"]["isError"], true, "{direct}");
    assert_eq!(
        direct["result"]["_meta"]["codemode/stats"]["limit"],
        "--max-execution-time"
    );
    let id = task_id(&execute(&server, None, &nap(600), true));
    let task = until_ended(&server, None, &id);
    assert_eq!(
        task["result"]["result"]["structuredContent"],
        json!({"result": {"ms": 600}}),
        "{task}"
    );
    // Longer than --max-task-time: the task's limit fired, and says so.
    let id = task_id(&execute(&server, None, &nap(5000), true));
    let task = until_ended(&server, None, &id);
    let result = &task["result"]["result"];
    assert_eq!(task["result"]["status"], "completed", "{task}");
    assert_eq!(result["isError"], true, "{task}");
    assert_eq!(result["content"][0]["text"], "resource limit exceeded");
    assert_eq!(
        result["_meta"]["codemode/stats"]["limit"],
        "--max-task-time"
    );
}

/// A tokens file of test `label` for the subjects `ada` and `bob` (their
/// tokens are `ada-secret` and `bob-secret`).
fn tokens_file(label: &str) -> std::path::PathBuf {
    let dir = crate::support::root().join("target/e2e-tasks");
    std::fs::create_dir_all(&dir).expect("create the folder");
    let tokens = dir.join(format!("{label}.tokens"));
    std::fs::write(
        &tokens,
        format!(
            "ada {}\nbob {}\n",
            codemode_server::authz::token_hash("ada-secret"),
            codemode_server::authz::token_hash("bob-secret")
        ),
    )
    .expect("write the tokens");
    tokens
}

#[test]
fn a_subject_sees_and_cancels_only_its_own_tasks_and_the_oldest_ended_goes_first() {
    subjects_and_eviction("tasks-subjects", &[]);
}

#[test]
fn in_redis_a_subject_sees_only_its_own_tasks_and_the_oldest_ended_goes_first() {
    let redis = RedisServer::start("subjects");
    // `--store` alone: the tasks go to its Redis, as state and quotas do.
    subjects_and_eviction("tasks-subjects-redis", &["--store", &redis.url()]);
}

/// Two subjects' tasks on a server with `--max-tasks 2` and `extra`.
fn subjects_and_eviction(label: &str, extra: &[&str]) {
    let tokens = tokens_file(label);
    let mut args = vec![
        "--tokens",
        tokens.to_str().expect("utf-8"),
        "--max-tasks",
        "2",
    ];
    args.extend_from_slice(extra);
    let server = server(label, &args);
    let (ada, bob) = (Some("ada-secret"), Some("bob-secret"));
    let long = task_id(&execute(&server, ada, &nap(60_000), true));
    assert_eq!(get(&server, bob, &long)["error"], not_found());
    assert_eq!(cancel(&server, bob, &long)["error"], not_found());
    assert_eq!(get(&server, ada, &long)["result"]["status"], "working");
    let bobs = task_id(&execute(&server, bob, &nap(1), true));
    assert_eq!(
        until_ended(&server, bob, &bobs)["result"]["status"],
        "completed"
    );
    // The board holds two: the oldest ended task goes, never a running one.
    let short = task_id(&execute(&server, ada, &nap(1), true));
    assert_eq!(get(&server, bob, &bobs)["error"], not_found());
    assert_eq!(get(&server, ada, &long)["result"]["status"], "working");
    until_ended(&server, ada, &short);
    let second_long = task_id(&execute(&server, ada, &nap(60_000), true));
    assert_eq!(get(&server, ada, &short)["error"], not_found());
    // Two running tasks fill it: a third is refused, at once.
    assert_refused(&execute(&server, bob, &nap(1), true), "--max-tasks");
    for id in [&long, &second_long] {
        assert_cancel_acknowledged(&server, ada, id);
    }
}

#[test]
fn tasks_run_in_half_the_slots_and_direct_calls_keep_the_rest() {
    let server = server("tasks-slots", &["--max-concurrent-executions", "2"]);
    let long = task_id(&execute(&server, None, &nap(60_000), true));
    assert_refused(
        &execute(&server, None, &nap(1), true),
        "--max-concurrent-executions",
    );
    assert_a_direct_call_is_served(&server);
    assert_cancel_acknowledged(&server, None, &long);
    // Its slot is free again.
    let next = task_id(&execute(&server, None, &nap(1), true));
    assert_eq!(
        until_ended(&server, None, &next)["result"]["status"],
        "completed"
    );
}

/// Over stdio (one thread serves the requests) a task runs while the client
/// asks for it, on the same pipe.
#[test]
fn over_stdio_a_task_runs_between_requests() {
    let plugins = plugin_folder("tasks-stdio", &[test_plugin("sleepy")]);
    let mut server =
        crate::support::StdioClient::start(&["--plugins", plugins.to_str().expect("utf-8 path")]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    });
    let mut next_id = 0;
    let mut ask = |method: &str, mut params: Value| -> Value {
        next_id += 1;
        params["_meta"] = meta.clone();
        let request = json!({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params});
        let answer = server.exchange(request.to_string());
        assert_eq!(answer["id"], next_id, "{answer}");
        answer
    };
    let created = ask(
        "tools/call",
        json!({"name": "execute", "arguments": {"source": nap(200)}}),
    );
    let id = task_id(&created);
    let mut last = Value::Null;
    wait_until(
        "the task to end over stdio",
        || {
            last = ask("tasks/get", json!({"taskId": id}));
            last["result"]["status"] != "working"
        },
        String::new,
    );
    assert_eq!(last["result"]["status"], "completed", "{last}");
    assert_eq!(
        last["result"]["result"]["structuredContent"],
        json!({"result": {"ms": 200}})
    );
    let status = server.close();
    assert!(status.success(), "{status}");
}

/// The error of a task request while the task store does not answer.
fn unavailable() -> Value {
    json!({"code": -32603, "message": "Task store unavailable: try again later"})
}

/// Two replicas share one Redis: a task one runs is read, and cancelled, on
/// the other, for its subject only; the cancel stops the execution where it
/// runs (its only task slot is free again).
#[test]
fn replicas_behind_a_balancer_share_tasks_through_redis() {
    let redis = RedisServer::start("replicas");
    let url = redis.url();
    let tokens = tokens_file("tasks-replicas");
    let tokens = tokens.to_str().expect("utf-8");
    let common = ["--tokens", tokens, "--task-store", &url];
    let mut first = common.to_vec();
    // One task at a time on the first replica.
    first.extend(["--max-concurrent-executions", "2"]);
    let a = server("tasks-replica-a", &first);
    let b = server("tasks-replica-b", &common);
    assert!(
        a.log().contains(&format!(
            "tasks are kept in Redis, shared with the other replicas store={url}"
        )),
        "{}",
        a.log()
    );
    assert!(!a.log().contains("not subscribed"), "{}", a.log());
    let (ada, bob) = (Some("ada-secret"), Some("bob-secret"));
    // Made on A, read on B: exactly what A answers.
    let id = task_id(&execute(&a, ada, &nap(200), true));
    let on_b = until_ended(&b, ada, &id);
    assert_eq!(on_b["result"]["status"], "completed", "{on_b}");
    assert_eq!(
        on_b["result"]["result"]["structuredContent"],
        json!({"result": {"ms": 200}})
    );
    assert_eq!(get(&a, ada, &id), on_b);
    assert_eq!(get(&b, bob, &id)["error"], not_found());
    // Running on A, cancelled on B.
    let source = "def main():\n    sleepy.nap(ms=1)\n    return sleepy.nap(ms=60000)";
    let long = task_id(&execute(&a, ada, source, true));
    wait_for_audit(&a, "\"outcome\":\"ok\"", 2);
    assert_eq!(get(&b, ada, &long)["result"]["status"], "working");
    assert_refused(
        &execute(&a, ada, &nap(1), true),
        "--max-concurrent-executions",
    );
    assert_eq!(cancel(&b, bob, &long)["error"], not_found());
    assert_cancel_acknowledged(&b, ada, &long);
    assert_eq!(get(&a, ada, &long)["result"]["status"], "cancelled");
    // A heard of it and stopped the execution: its one task slot is free long
    // before the nap would end.
    wait_for_log(
        &a,
        "task cancelled through the task store: its execution stopped",
        1,
    );
    let next = task_id(&execute(&a, ada, &nap(1), true));
    assert_eq!(until_ended(&b, ada, &next)["result"]["status"], "completed");
    // The execution ending later changes nothing.
    assert_eq!(get(&b, ada, &long)["result"]["status"], "cancelled");
}

/// Redis goes away while a task runs: requests about tasks fail with a clear
/// error at once, the result of the task that ends meanwhile is written when
/// Redis is back, and what was stored before is still there.
#[test]
fn redis_going_away_mid_task_loses_no_result() {
    let mut redis = RedisServer::start("outage");
    let server = server("tasks-outage", &["--task-store", &redis.url()]);
    let stored = task_id(&execute(&server, None, &nap(1), true));
    let before = until_ended(&server, None, &stored);
    assert_eq!(before["result"]["status"], "completed", "{before}");
    let running = task_id(&execute(&server, None, &nap(1500), true));
    redis.kill();
    assert_eq!(get(&server, None, &stored)["error"], unavailable());
    assert_eq!(cancel(&server, None, &running)["error"], unavailable());
    assert_eq!(
        execute(&server, None, &nap(1), true)["error"],
        unavailable()
    );
    // A client that did not ask for a task is not affected.
    assert_a_direct_call_is_served(&server);
    // The running task ends while Redis is away: its result waits.
    wait_for_log(
        &server,
        "cannot store the task result yet: the task store is unavailable; retrying",
        1,
    );
    redis.restart();
    let last = std::cell::RefCell::new(Value::Null);
    wait_until(
        "the stored result to be read again",
        || {
            *last.borrow_mut() = get(&server, None, &stored);
            *last.borrow() == before
        },
        || last.borrow().to_string(),
    );
    let last = std::cell::RefCell::new(Value::Null);
    wait_until(
        "the pending result to be written",
        || {
            *last.borrow_mut() = get(&server, None, &running);
            last.borrow()["result"]["status"] == "completed"
        },
        || last.borrow().to_string(),
    );
    let after = last.into_inner();
    assert_eq!(
        after["result"]["result"]["structuredContent"],
        json!({"result": {"ms": 1500}}),
        "{after}"
    );
    wait_for_log(
        &server,
        "task result stored after the task store came back",
        1,
    );
}

/// A server whose task store does not answer serves direct calls and says
/// so, without the password; a URL it cannot use stops the start, the
/// password hidden there too.
#[test]
fn a_task_store_that_does_not_answer_leaves_direct_calls_served() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("redis://:s3cret@127.0.0.1:{port}/0");
    let server = server("tasks-no-redis", &["--task-store", &url]);
    assert!(
        server.log().contains(&format!(
            "the task store does not answer: direct calls are served, requests about tasks fail until it does store=redis://***@127.0.0.1:{port}/0"
        )),
        "{}",
        server.log()
    );
    assert_a_direct_call_is_served(&server);
    assert_eq!(
        execute(&server, None, &nap(1), true)["error"],
        unavailable()
    );
    assert!(!server.log().contains("s3cret"), "{}", server.log());
    let plugins = plugin_folder("tasks-no-redis", &[test_plugin("sleepy")]);
    for (bad, reason) in [
        (
            "rediss://:s3/cret@h:6380/0",
            "--task-store rediss://***@h:6380/0: TLS to Redis (rediss://) is not supported; reach Redis on a private network",
        ),
        (
            "redis://:s3/cret@h:6380/zero",
            "--task-store redis://***@h:6380/zero: not a Redis URL (InvalidClientConfig)",
        ),
    ] {
        let (lines, code) = crate::support::startup_log(&[
            "--plugins",
            plugins.to_str().expect("utf-8"),
            "--task-store",
            bad,
        ]);
        assert_eq!(code, Some(1), "{lines:?}");
        let text = lines.join("\n");
        assert!(text.contains(reason), "{lines:?}");
        assert!(!text.contains("s3/cret"), "{lines:?}");
    }
}

/// Redis restarted with nothing stored while a task runs: the task's end
/// writes it again whole.
#[test]
fn a_task_redis_lost_is_written_again_when_it_ends() {
    let mut redis = RedisServer::start("emptied");
    let server = server("tasks-emptied", &["--task-store", &redis.url()]);
    let id = task_id(&execute(&server, None, &nap(1500), true));
    redis.restart_empty();
    let last = std::cell::RefCell::new(Value::Null);
    wait_until(
        "the task to be written again",
        || {
            *last.borrow_mut() = get(&server, None, &id);
            last.borrow()["result"]["status"] == "completed"
        },
        || last.borrow().to_string(),
    );
    assert_eq!(
        last.borrow()["result"]["result"]["structuredContent"],
        json!({"result": {"ms": 1500}})
    );
}

/// The store's own rules in Redis: at most `max_tasks`, the oldest ended (or
/// stale) first and never a working one; at most `max_stored_bytes` of
/// results; a subject's tasks only.
#[test]
fn the_redis_store_keeps_its_limits() {
    use codemode_server::tasks::{RedisTasks, TaskLimits, TaskRefused, TaskState};
    use std::sync::Arc;
    use std::time::Duration;
    let redis = RedisServer::start("limits");
    let limits = TaskLimits {
        max_task_time: Duration::from_secs(60),
        ttl: Duration::from_secs(600),
        max_tasks: 3,
        max_running: 10,
        max_stored_bytes: 100,
    };
    let runtime = crate::support::runtime();
    runtime.block_on(async {
        let store = RedisTasks::connect(&redis.url(), limits)
            .await
            .expect("connect");
        let ended = |id: String| {
            let store = &store;
            async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
                loop {
                    let view = store.get("ada", &id).await.expect("Redis answers");
                    if view.as_ref().is_some_and(|v| v.state.is_terminal()) {
                        return view;
                    }
                    assert!(tokio::time::Instant::now() < deadline, "{id} never ended");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        let a = store.create("ada").await.expect("a").id;
        store.finish(&a, TaskState::Completed(Arc::from("x".repeat(60))));
        ended(a.clone()).await;
        // 120 bytes of results: the oldest ended goes.
        let b = store.create("ada").await.expect("b").id;
        store.finish(&b, TaskState::Completed(Arc::from("y".repeat(60))));
        assert_eq!(
            ended(b.clone()).await.map(|v| v.state),
            Some(TaskState::Completed(Arc::from("y".repeat(60))))
        );
        assert_eq!(store.get("ada", &a).await, Ok(None));
        assert_eq!(store.get("bob", &b).await, Ok(None));
        // A stale working task (its replica gone) counts as ended.
        redis.command(&[
            "HSET",
            "codemode:task:0123456789abcdef0123456789abcdef",
            "subject",
            "ada",
            "status",
            "working",
            "created",
            "1",
            "updated",
            "1",
        ]);
        redis.command(&[
            "ZADD",
            "codemode:tasks",
            "1",
            "0123456789abcdef0123456789abcdef",
        ]);
        assert_eq!(
            store
                .get("ada", "0123456789abcdef0123456789abcdef")
                .await
                .map(|v| v.map(|v| v.state)),
            Ok(Some(TaskState::Lost))
        );
        // Three kept (the stale one, b, c): the next create drops the stale one
        // (the oldest), then b; then all three work and a fourth is refused.
        let c = store.create("ada").await.expect("c").id;
        let d = store.create("ada").await.expect("d").id;
        assert_eq!(
            store.get("ada", "0123456789abcdef0123456789abcdef").await,
            Ok(None)
        );
        let e = store.create("ada").await.expect("e").id;
        assert_eq!(store.get("ada", &b).await, Ok(None));
        assert_eq!(
            store.create("ada").await.map(|v| v.id),
            Err(TaskRefused::Full)
        );
        // Only its subject cancels it.
        assert_eq!(store.cancel("bob", &c).await, Ok(false));
        assert_eq!(store.cancel("ada", &c).await, Ok(true));
        assert_eq!(
            store.get("ada", &c).await.map(|v| v.map(|v| v.state)),
            Ok(Some(TaskState::Cancelled))
        );
        // Its end comes later and changes nothing.
        store.finish(&c, TaskState::Completed(Arc::from("1")));
        for id in [&d, &e] {
            assert_eq!(
                store.get("ada", id).await.map(|v| v.map(|v| v.state)),
                Ok(Some(TaskState::Working))
            );
        }
        assert_eq!(store.cancel_all().await, 2);
        assert_eq!(
            store.get("ada", &d).await.map(|v| v.map(|v| v.state)),
            Ok(Some(TaskState::Cancelled))
        );
    });
}

/// Issue 49: values planted in the store (by whoever else can write Redis)
/// over the bounds a server writes are not read: such a task reads as none.
#[test]
fn values_planted_in_redis_over_the_bounds_are_not_read() {
    use codemode_server::tasks::{RedisTasks, TaskLimits, TaskState};
    use std::sync::Arc;
    use std::time::Duration;
    let redis = RedisServer::start("planted");
    let limits = TaskLimits {
        max_task_time: Duration::from_secs(60),
        ttl: Duration::from_secs(600),
        max_tasks: 10,
        max_running: 10,
        max_stored_bytes: 100,
    };
    let plant = |id: &str, field: &str, value: &str| {
        let key = format!("codemode:task:{id}");
        let mut args = vec![
            "HSET",
            key.as_str(),
            "subject",
            "ada",
            "status",
            "completed",
        ];
        args.extend(["created", "1", "updated", "1", "ended", "1", "payload", "1"]);
        args.extend([field, value]);
        redis.command(&args);
    };
    let runtime = crate::support::runtime();
    runtime.block_on(async {
        let store = RedisTasks::connect(&redis.url(), limits)
            .await
            .expect("connect");
        // Within the bounds: read.
        let fits = "0123456789abcdef0123456789abcde0";
        plant(fits, "payload", &"p".repeat(100));
        assert_eq!(
            store.get("ada", fits).await.map(|v| v.map(|v| v.state)),
            Ok(Some(TaskState::Completed(Arc::from("p".repeat(100)))))
        );
        // A result over --task-store's bound of results, a subject or status
        // over a small field's: none is read.
        let over = "0123456789abcdef0123456789abcde1";
        plant(over, "payload", &"p".repeat(101));
        assert_eq!(store.get("ada", over).await, Ok(None));
        let subject = "0123456789abcdef0123456789abcde2";
        plant(subject, "subject", &"a".repeat(5000));
        assert_eq!(store.get(&"a".repeat(5000), subject).await, Ok(None));
        let input = "0123456789abcdef0123456789abcde3";
        plant(input, "status", "input_required");
        redis.command(&[
            "HSET",
            &format!("codemode:task:{input}"),
            "input",
            &"i".repeat(1024 * 1024 + 1),
        ]);
        assert_eq!(store.get("ada", input).await, Ok(None));
    });
}

/// The README's two requests, as written (`TASK_ID` replaced by the handle's):
/// a task made and its result read, against the example plugins.
#[test]
fn the_readme_task_requests_make_a_task_and_read_its_result() {
    let readme =
        std::fs::read_to_string(crate::support::root().join("README.md")).expect("read the README");
    let at = readme
        .find("To try one from a shell")
        .expect("the README's task try-it");
    let block = &readme[at..];
    let block = &block[block.find("```sh\n").expect("its commands") + 6..];
    let block = &block[..block.find("```").expect("their end")];
    // Each `curl`: its `-H 'Name: value'` headers and its `-d '...'` body.
    let commands: Vec<(Vec<(String, String)>, String)> = block
        .split("curl -s ")
        .skip(1)
        .map(|command| {
            let quoted: Vec<&str> = command.split('\'').skip(1).step_by(2).collect();
            let mut headers = Vec::new();
            let mut body = String::new();
            for (flag, text) in command.split('\'').step_by(2).zip(quoted) {
                if flag.trim_end().ends_with("-H") {
                    let (name, value) = text.split_once(": ").expect("a header");
                    headers.push((name.to_owned(), value.to_owned()));
                } else if flag.trim_end().ends_with("-d") {
                    body = text.to_owned();
                }
            }
            (headers, body)
        })
        .collect();
    assert_eq!(commands.len(), 2, "{block}");
    let plugins = crate::support::example_plugins();
    let server = HttpServer::start(&["--allow-all", "--plugins", plugins.to_str().expect("utf-8")]);
    let send = |(headers, body): &(Vec<(String, String)>, String), id: &str| -> Value {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| (name.clone(), value.replace("TASK_ID", id)))
            .collect();
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        let answer = raw_request(
            server.port,
            "POST",
            "/mcp",
            &headers,
            &body.replace("TASK_ID", id),
        );
        assert_eq!(answer.status, 200, "{answer:?}");
        serde_json::from_str(&answer.body).expect("JSON")
    };
    let id = task_id(&send(&commands[0], ""));
    let done = std::cell::RefCell::new(Value::Null);
    wait_until(
        "the task to end",
        || {
            *done.borrow_mut() = send(&commands[1], &id);
            done.borrow()["result"]["status"] != "working"
        },
        || done.borrow().to_string(),
    );
    let done = done.into_inner();
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["structuredContent"],
        json!({"result": 3.0}),
        "{done}"
    );
}

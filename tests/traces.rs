//! Trace context and OpenTelemetry export: spans reach a real OTLP/HTTP receiver
//! (tests/clients/otlp_receiver.py, decoding with the official `opentelemetry-proto`
//! definitions), an execute's span is a child of the client's and its calls' spans
//! are its children, and upstreams (a stdio child and an HTTP server) continue the
//! same trace.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::stdio::{call, ok};
use crate::support::{
    HttpServer, drive_http, drive_with_env, example_plugins, python, root, wait_until,
};

/// The client's span: the trace every test continues.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn client_traceparent() -> String {
    format!("00-{TRACE_ID}-{CLIENT_SPAN}-01")
}

/// Spans exported within a test's wait: the receiver's batches are sent every
/// 100 ms instead of every 5 s.
const BATCH_DELAY: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "100");

/// A running receiver: its port and the spans it printed so far.
struct Receiver {
    child: Child,
    port: u16,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start() -> Self {
        let child = Command::new(python())
            .arg(root().join("tests/clients/otlp_receiver.py"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the receiver");
        // Ended by Drop even when reading its first line fails.
        let mut receiver = Self {
            child,
            port: 0,
            spans: Arc::new(Mutex::new(Vec::new())),
        };
        let stdout = receiver.child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().expect("a first line").expect("read it");
        receiver.port = first
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not a port: {first}"));
        let sink = receiver.spans.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let span: Value = serde_json::from_str(&line).expect("a JSON span");
                sink.lock().expect("spans").push(span);
            }
        });
        receiver
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits until a span named `name` of `service` arrived, and returns it.
    fn span(&self, service: &str, name: &str) -> Value {
        let named = |s: &Value| s["name"] == name && s["service"] == service;
        let spans = self.spans_once(&format!("the span {name:?} of {service}"), 1, named);
        spans.into_iter().find(named).expect("the span")
    }

    /// Waits until `count` of the spans match `matches` (`what` names them),
    /// and returns every span received by then.
    fn spans_once(&self, what: &str, count: usize, matches: impl Fn(&Value) -> bool) -> Vec<Value> {
        let matching = || {
            let spans = self.spans.lock().expect("spans");
            spans.iter().filter(|s| matches(s)).count()
        };
        wait_until(
            what,
            || matching() >= count,
            || format!("{:#?}", self.spans.lock().expect("spans")),
        );
        self.spans.lock().expect("spans").clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config file `name.toml` with `body`, in a folder of this test's own.
fn config(name: &str, body: &str) -> PathBuf {
    let dir = root().join("target/e2e-traces").join(name);
    std::fs::create_dir_all(dir.join("plugins")).expect("create the folder");
    let path = dir.join("codemode.toml");
    std::fs::write(&path, body).expect("write the config");
    path
}

/// The double upstream (tests/upstreams/double.py) as a stdio child.
fn double_upstream() -> String {
    format!(
        "[[upstream]]\nname = \"double\"\ncommand = [{:?}, {:?}]\ntimeout = \"20s\"\n",
        python().display().to_string(),
        root()
            .join("tests/upstreams/double.py")
            .display()
            .to_string(),
    )
}

fn execute_with_trace(source: &str) -> Value {
    let mut step = call("execute", json!({ "source": source }));
    step["meta"] = json!({ "traceparent": client_traceparent(), "tracestate": "vendor=x1" });
    step
}

#[test]
fn an_execute_span_parents_its_calls_and_the_upstream_continues_the_trace() {
    let receiver = Receiver::start();
    let examples = example_plugins();
    let path = config(
        "stdio",
        &format!(
            "plugins = {:?}\nmax-execution-time = \"20s\"\nmax-native-calls = 5\n\n{}",
            examples.display().to_string(),
            double_upstream()
        ),
    );
    let out = drive_with_env(
        &[
            "--config",
            path.to_str().expect("utf-8"),
            "--otlp-endpoint",
            &receiver.endpoint(),
        ],
        &json!({ BATCH_DELAY.0: BATCH_DELAY.1 }),
        json!([
            execute_with_trace(
                "def main():\n    book = records.lookup(key=\"bk-0001\")\n    return {\"seen\": double.trace()[\"result\"], \"key\": book[\"key\"]}"
            ),
            execute_with_trace("def main():\n    return records.lookup(key=\"nope\")"),
            execute_with_trace(
                "def main():\n    return [records.lookup(key=\"bk-0001\")[\"key\"] for i in range(9)]"
            ),
        ]),
    );
    let result = &ok(&out["results"][0])["result"];
    let execute = receiver.span("codemode-host", "execute");
    assert_eq!(execute["path"], "/v1/traces");
    assert_eq!(execute["trace_id"], TRACE_ID);
    assert_eq!(execute["parent_span_id"], CLIENT_SPAN);
    assert_eq!(execute["kind"], 2, "SPAN_KIND_SERVER");
    let attributes = &execute["attributes"];
    assert_eq!(attributes["codemode.subject"], "local");
    assert_eq!(attributes["codemode.outcome"], "ok");
    assert_eq!(attributes["codemode.native_calls"], 2);
    assert!(
        attributes["codemode.fuel"].as_i64().is_some_and(|f| f > 0),
        "{execute}"
    );
    let lookup = receiver.span("codemode-host", "call records.lookup");
    let traced = receiver.span("codemode-host", "call double.trace");
    for call in [&lookup, &traced] {
        assert_eq!(call["trace_id"], TRACE_ID, "{call}");
        assert_eq!(call["parent_span_id"], execute["span_id"], "{call}");
        assert_eq!(call["attributes"]["codemode.outcome"], "ok", "{call}");
    }
    assert_eq!(
        lookup["attributes"]["codemode.capability_id"],
        "records.lookup"
    );
    assert!(
        lookup["attributes"]["codemode.fuel"]
            .as_i64()
            .is_some_and(|f| f > 0)
    );
    assert!(
        lookup["attributes"]["codemode.bytes"]
            .as_i64()
            .is_some_and(|b| b > 0)
    );
    assert_eq!(
        traced["attributes"]["codemode.capability_id"],
        "mcp:double/trace"
    );
    // The upstream got the call's own span as its parent, in the request's _meta.
    assert_eq!(
        result["seen"],
        format!(
            "00-{TRACE_ID}-{}-01",
            traced["span_id"].as_str().expect("id")
        ),
        "{result}"
    );
    // A failed execution: its span says how, and so does its call's.
    let failed = |s: &Value| s["attributes"]["codemode.outcome"] == "capability failed";
    let spans = receiver.spans_once("the failed execution's spans", 2, failed);
    assert_eq!(spans.iter().filter(|s| failed(s)).count(), 2, "{spans:#?}");
    let failed_execute = spans
        .iter()
        .find(|s| failed(s) && s["name"] == "execute")
        .expect("the failed execute's span");
    assert_eq!(failed_execute["status"], 2, "STATUS_CODE_ERROR");
    assert_eq!(failed_execute["parent_span_id"], CLIENT_SPAN);
    assert!(
        spans.iter().any(|s| failed(s)
            && s["name"] == "call records.lookup"
            && s["parent_span_id"] == failed_execute["span_id"]),
        "{spans:#?}"
    );
    // The limit that fired, on the execute span; the call it stopped says so.
    let limited = |s: &Value| s["attributes"]["codemode.outcome"] == "resource limit exceeded";
    let spans = receiver.spans_once("the limited execution's span", 1, |s| {
        limited(s) && s["name"] == "execute"
    });
    let limited_execute = spans
        .iter()
        .find(|s| limited(s) && s["name"] == "execute")
        .expect("the limited execute's span");
    assert_eq!(
        limited_execute["attributes"]["codemode.limit"],
        "--max-native-calls"
    );
    assert_eq!(limited_execute["attributes"]["codemode.native_calls"], 6);
    assert!(
        spans.iter().any(|s| limited(s)
            && s["name"] == "call records.lookup"
            && s["parent_span_id"] == limited_execute["span_id"]),
        "{spans:#?}"
    );
    // Never an argument or a result in a span.
    let text = serde_json::to_string(&spans).expect("JSON");
    for secret in ["bk-0001", "nope", "The Burning Tide"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}

#[test]
fn without_an_exporter_the_request_context_reaches_the_upstream_as_it_came() {
    let path = config("forward", &format!("{}\n", double_upstream()));
    let out = drive_with_env(
        &["--config", path.to_str().expect("utf-8")],
        &json!({}),
        json!([
            execute_with_trace("def main():\n    return double.trace()"),
            call(
                "execute",
                json!({ "source": "def main():\n    return double.trace()" })
            ),
        ]),
    );
    assert_eq!(
        ok(&out["results"][0])["result"]["result"],
        client_traceparent()
    );
    assert_eq!(ok(&out["results"][1])["result"]["result"], "<none>");
}

#[test]
fn an_http_upstream_joins_the_trace_and_http_headers_carry_context_in() {
    let receiver = Receiver::start();
    let examples = example_plugins();
    let inner = HttpServer::start_with_env(
        &[
            "--plugins",
            examples.to_str().expect("utf-8"),
            "--allow-all",
            "--otlp-endpoint",
            &receiver.endpoint(),
        ],
        &[BATCH_DELAY, ("OTEL_SERVICE_NAME", "inner")],
    );
    // The client's context in the HTTP header (no _meta): the inner server's
    // execute span is its child.
    let out = drive_http(
        &inner.url(),
        json!({ "traceparent": client_traceparent() }),
        "legacy",
        json!([call(
            "execute",
            json!({ "source": "def main():\n    return records.lookup(key=\"bk-0002\")[\"key\"]" })
        )]),
    );
    assert_eq!(ok(&out["results"][0])["result"], "bk-0002");
    let direct = receiver.span("inner", "execute");
    assert_eq!(direct["trace_id"], TRACE_ID);
    assert_eq!(direct["parent_span_id"], CLIENT_SPAN);
    // An outer server reaches the inner one as an upstream over HTTP: the inner's
    // execute is a child of the outer's call span.
    let path = config(
        "http",
        &format!(
            "[[upstream]]\nname = \"inner\"\nurl = {:?}\ntimeout = \"20s\"\n",
            inner.url()
        ),
    );
    receiver.spans.lock().expect("spans").clear();
    let out = drive_with_env(
        &[
            "--config",
            path.to_str().expect("utf-8"),
            "--otlp-endpoint",
            &receiver.endpoint(),
        ],
        &json!({ BATCH_DELAY.0: BATCH_DELAY.1, "OTEL_SERVICE_NAME": "outer" }),
        json!([execute_with_trace(
            "def main():\n    return inner.execute(source=\"def main():\\n    return 7\")"
        )]),
    );
    assert_eq!(ok(&out["results"][0])["result"]["result"], 7);
    let outer = receiver.span("outer", "execute");
    let hop = receiver.span("outer", "call inner.execute");
    let inner_execute = receiver.span("inner", "execute");
    assert_eq!(outer["parent_span_id"], CLIENT_SPAN);
    assert_eq!(hop["parent_span_id"], outer["span_id"]);
    assert_eq!(inner_execute["trace_id"], TRACE_ID);
    assert_eq!(inner_execute["parent_span_id"], hop["span_id"]);
}

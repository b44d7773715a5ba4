//! Every wait is bounded, also outside wasm: a plugin waiting in a host call (the
//! `sleepy` test plugin sleeps on a WASI clock, where neither fuel nor the epoch
//! deadline can stop it) ends at the execution's budget, at its plugin's `timeout`,
//! or when its request is cancelled, and frees its slot; host work sized by the
//! program (suggestions for an unknown name) is bounded by the catalog, not by the
//! program. Driven through the library, where a request future can be dropped at a
//! chosen moment.
//!
//! Each wait that must end early is given a far later deadline of its own (60 s):
//! before these bounds the calls answered only when the plugin woke (100 s) or,
//! for the long name, after minutes, so the tests failed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use codemode_server::authz::Subject;
use codemode_server::{LOCAL_SUBJECT, Service, ToolError};
use serde_json::json;

use crate::support::{
    example_plugins, library_service, plugin_folder, runtime, started, test_plugin,
};

const TRIVIAL: &str = "def main():\n    return 1";
/// Far past every budget the tests set: a wait still going then was not bounded.
const UNBOUNDED: Duration = Duration::from_secs(60);

/// A service over `files` (plus an optional sidecar for `sleepy.wasm`), with
/// `slots` execution slots and a time budget of `time`.
fn service(
    label: &str,
    files: &[PathBuf],
    sidecar: Option<&str>,
    slots: usize,
    time: Duration,
) -> Arc<Service> {
    let dir = plugin_folder(label, files);
    if let Some(sidecar) = sidecar {
        std::fs::write(dir.join("sleepy.toml"), sidecar).expect("write the sidecar");
    }
    library_service(dir, slots, time)
}

fn nap(ms: u64) -> String {
    format!("def main():\n    return sleepy.nap(ms={ms})")
}

/// Runs `source` and fails the test if it is not answered within [`UNBOUNDED`].
async fn execute_bounded(service: &Service, source: &str) -> Result<serde_json::Value, ToolError> {
    tokio::time::timeout(
        UNBOUNDED,
        service.execute(&Subject::new(LOCAL_SUBJECT), source),
    )
    .await
    .expect("answered long before the plugin woke: the wait is bounded")
    .map(|executed| executed.value)
}

#[test]
fn a_short_nap_returns_and_its_instance_serves_the_next_call() {
    let service = service(
        "waits-short",
        &[test_plugin("sleepy")],
        None,
        1,
        Duration::from_secs(20),
    );
    let program =
        "def main():\n    a = sleepy.nap(ms=5)\n    b = sleepy.nap(ms=1)\n    return [a, b]";
    let got = runtime().block_on(execute_bounded(&service, program));
    assert_eq!(got, Ok(json!([{"ms": 5}, {"ms": 1}])));
}

#[test]
fn a_plugin_waiting_in_a_host_call_ends_at_the_execution_budget() {
    let service = service(
        "waits-budget",
        &[test_plugin("sleepy")],
        None,
        1,
        Duration::from_secs(1),
    );
    runtime().block_on(async {
        // 100 s of sleep under a 1 s budget.
        let got = execute_bounded(&service, &nap(100_000)).await;
        assert_eq!(got, Err(ToolError::ResourceLimit));
        // The slot is free again: the next execution runs.
        assert_eq!(execute_bounded(&service, TRIVIAL).await, Ok(json!(1)));
    });
}

#[test]
fn a_plugin_waiting_past_its_timeout_fails_with_the_timeout_text() {
    let service = service(
        "waits-timeout",
        &[test_plugin("sleepy")],
        Some("timeout = \"300ms\"\n"),
        1,
        Duration::from_secs(120),
    );
    runtime().block_on(async {
        let got = execute_bounded(&service, &nap(100_000)).await;
        assert_eq!(
            got.map_err(|e| e.to_string()),
            Err("capability failed: sleepy.nap timed out".to_owned())
        );
        // Within its timeout the plugin answers as usual.
        assert_eq!(
            execute_bounded(&service, &nap(10)).await,
            Ok(json!({"ms": 10}))
        );
    });
}

#[test]
fn a_request_cancelled_while_its_plugin_waits_frees_its_slot() {
    // One slot and a long budget: only cancellation can free the slot in time.
    let service = service(
        "waits-cancel",
        &[test_plugin("sleepy")],
        None,
        1,
        Duration::from_secs(120),
    );
    runtime().block_on(async {
        let sleeper = {
            let service = service.clone();
            tokio::spawn(async move {
                service
                    .execute(&Subject::new(LOCAL_SUBJECT), &nap(100_000))
                    .await
            })
        };
        // Cancel once the sleeper holds the slot.
        started(&service, 1).await;
        sleeper.abort();
        assert!(sleeper.await.is_err_and(|e| e.is_cancelled()));
        assert_eq!(execute_bounded(&service, TRIVIAL).await, Ok(json!(1)));
        assert_eq!(service.executions_started(), 2);
    });
}

#[test]
fn sleepers_in_every_slot_give_them_back_at_their_budget() {
    let service = service(
        "waits-all-slots",
        &[test_plugin("sleepy")],
        None,
        4,
        Duration::from_secs(1),
    );
    runtime().block_on(async {
        let sleepers: Vec<_> = (0..4)
            .map(|_| {
                let service = service.clone();
                tokio::spawn(async move { execute_bounded(&service, &nap(100_000)).await })
            })
            .collect();
        for sleeper in sleepers {
            assert_eq!(sleeper.await.expect("task"), Err(ToolError::ResourceLimit));
        }
        assert_eq!(execute_bounded(&service, TRIVIAL).await, Ok(json!(1)));
    });
}

#[test]
fn an_unknown_name_of_any_length_costs_no_more_than_the_catalog() {
    // 15 s: a tenth of what the comparison once cost, with room for a machine
    // whose cores the rest of the suite keeps busy (5 s ran out there).
    let service = service(
        "waits-long-name",
        &[example_plugins().join("records.wasm")],
        None,
        1,
        Duration::from_secs(15),
    );
    runtime().block_on(async {
        // 20 M characters: compared against every catalog name, this kept a core
        // busy for 142 s (a dev build) outside any budget, and copied into the host
        // twice (for suggestions, then in the message) it left a few hundred MiB
        // in the allocator's arenas. It stays in the sandbox; the message quotes
        // the start of it.
        let got = execute_bounded(
            &service,
            "def main():\n    return getattr(records, 'a' * 20000000)(key='x')",
        )
        .await;
        assert_eq!(
            got.map_err(|e| e.to_string()),
            Err(format!("invalid program: runtime error at <codemode>:2:12: unknown capability `records.{}…` (find names with search_api)", "a".repeat(72)))
        );
        // A near miss still gets its suggestion.
        let got = execute_bounded(&service, "def main():\n    return records.lokup(key='x')").await;
        assert_eq!(
            got.map_err(|e| e.to_string()),
            Err("invalid program: runtime error at <codemode>:2:12: unknown capability `records.lokup`; did you mean records.lookup? (find names with search_api)".to_owned())
        );
    });
}

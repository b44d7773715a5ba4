//! Slots, queueing and cancellation, driven through the library (`Service`), where a
//! request future can be dropped at a chosen moment; and the language surface.

use std::sync::Arc;
use std::time::Duration;

use codemode_server::authz::Subject;
use codemode_server::{LOCAL_SUBJECT, Service, ToolError};
use serde_json::json;

use crate::support::{library_service, plugin_folder, runtime, started, test_plugin};

const TRIVIAL: &str = "def main():\n    return 1";
const SPIN: &str = "def main():\n    return hostile.spin()";

/// A service with the hostile plugin and the given slot count and time budget, its
/// plugins folder named by `label`.
fn service(label: &str, slots: usize, time: Duration) -> Arc<Service> {
    library_service(plugin_folder(label, &[test_plugin("hostile")]), slots, time)
}

#[test]
fn eight_run_at_once_and_the_ninth_waits_with_its_time_counting() {
    let budget = Duration::from_secs(2);
    let service = service("eight-slots", 8, budget);
    runtime().block_on(async {
        let spinners: Vec<_> = (0..8)
            .map(|_| {
                let service = service.clone();
                tokio::spawn(
                    async move { service.execute(&Subject::new(LOCAL_SUBJECT), SPIN).await },
                )
            })
            .collect();
        started(&service, 8).await;
        assert_eq!(service.executions_started(), 8);
        // The ninth queues until a spinner's budget ends. Its own budget started when
        // it arrived, so it gets only what is left: it ends about one budget after
        // arriving, not one budget after its slot came free (about twice as late).
        let arrived = std::time::Instant::now();
        let ninth = service.execute(&Subject::new(LOCAL_SUBJECT), SPIN).await;
        let took = arrived.elapsed();
        assert_eq!(ninth.map(|e| e.value), Err(ToolError::ResourceLimit));
        assert!(
            took < budget + budget / 2,
            "the wait did not count against the budget: took {took:?}"
        );
        for spinner in spinners {
            let outcome = spinner.await.expect("task");
            assert_eq!(outcome.map(|e| e.value), Err(ToolError::ResourceLimit));
        }
        // The ninth's deadline and the first free slot fall within a few
        // milliseconds of each other: whether it started before running out of time
        // is the machine's timing, not the server's behaviour.
        let before = service.executions_started();
        assert!((8..=9).contains(&before), "{before} executions started");
        let again = service
            .execute(&Subject::new(LOCAL_SUBJECT), TRIVIAL)
            .await
            .expect("runs");
        assert_eq!(again.value, json!(1));
        assert_eq!(service.executions_started(), before + 1);
    });
}

#[test]
fn a_free_slot_runs_alongside_a_busy_one() {
    let service = service("two-slots", 2, Duration::from_millis(1500));
    runtime().block_on(async {
        let busy = {
            let service = service.clone();
            tokio::spawn(async move { service.execute(&Subject::new(LOCAL_SUBJECT), SPIN).await })
        };
        started(&service, 1).await;
        let quick = service
            .execute(&Subject::new(LOCAL_SUBJECT), TRIVIAL)
            .await
            .expect("runs in the second slot");
        assert_eq!(quick.value, json!(1));
        assert!(!busy.is_finished(), "the spinner still holds its slot");
        let busy = busy.await.expect("task");
        assert_eq!(busy.map(|e| e.value), Err(ToolError::ResourceLimit));
    });
}

#[test]
fn a_cancelled_queued_request_never_starts() {
    let service = service("queued-cancel", 1, Duration::from_millis(1500));
    runtime().block_on(async {
        let busy = {
            let service = service.clone();
            tokio::spawn(async move { service.execute(&Subject::new(LOCAL_SUBJECT), SPIN).await })
        };
        started(&service, 1).await;
        let queued = tokio::time::timeout(
            Duration::from_millis(100),
            service.execute(&Subject::new(LOCAL_SUBJECT), TRIVIAL),
        )
        .await;
        assert!(queued.is_err(), "still queued when cancelled");
        let _ = busy.await;
        assert_eq!(service.executions_started(), 1);
    });
}

#[test]
fn a_request_cancelled_mid_run_frees_its_slot() {
    // One slot and a long budget: only cancellation can free the slot in time.
    let service = service("running-cancel", 1, Duration::from_secs(60));
    runtime().block_on(async {
        let cancelled = tokio::time::timeout(
            Duration::from_millis(300),
            service.execute(&Subject::new(LOCAL_SUBJECT), SPIN),
        )
        .await;
        if let Ok(ended) = &cancelled {
            panic!("the spinner ended within 300 ms, with {ended:?}");
        }
        let next = tokio::time::timeout(
            Duration::from_secs(20),
            service.execute(&Subject::new(LOCAL_SUBJECT), TRIVIAL),
        )
        .await
        .expect("the slot was freed well before the spinner's 60 s budget");
        assert_eq!(next.expect("runs").value, json!(1));
        assert_eq!(service.executions_started(), 2);
    });
}

#[test]
fn the_language_surface_is_exactly_the_seed_block() {
    let service = service("surface", 1, Duration::from_secs(5));
    let surface = service.surface().expect("surface");
    assert_eq!(surface, codemode_server::mcp::LANGUAGE_SURFACE);
}

//! `notifications/progress` for an `execute` whose request carried a
//! `progressToken`: the successful native calls so far and the latest one's
//! capability name (never arguments or results), at most one notification per
//! [`MIN_INTERVAL`] on the wire, the latest count always told, and none after the
//! answer.
//!
//! The execution's thread only records the latest count (it must not block); a
//! task sends it through the request's peer, waiting out the interval since the
//! one before, and the answer waits until the task told the last count (at most
//! [`FLUSH_TIMEOUT`]; a notification is awaited until the transport took it, so it
//! goes out before the answer). Over HTTP, rmcp answers a request that sent a
//! notification as an SSE stream, one that sent none as one JSON body, so a client
//! that does not ask for progress pays nothing.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::execute::Progress;

/// Least time between two progress notifications of one execution.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Longest the answer waits for the last count to be told (past the interval,
/// and a client that reads nothing would hold it): past it, it is not told.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// The latest count: calls done, the latest one's capability.
type Count = Option<(u64, String)>;

/// The progress notifications of one request, sent while it runs.
pub(crate) struct Reporter {
    notifier: Arc<Notifier>,
    end: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// What the execution calls: it replaces the latest count.
struct Notifier(watch::Sender<Count>);

impl Progress for Notifier {
    fn call_done(&self, calls: u64, capability: &str) {
        self.0.send_replace(Some((calls, capability.to_owned())));
    }
}

impl Reporter {
    /// Starts telling the progress of the request with `token` to `peer`.
    pub(crate) fn start(peer: Peer<RoleServer>, token: ProgressToken) -> Self {
        Self::with_sender(move |calls, capability| {
            let peer = peer.clone();
            let mut param = ProgressNotificationParam::new(token.clone(), calls as f64);
            param.message = Some(capability);
            async move {
                if let Err(error) = peer.notify_progress(param).await {
                    tracing::debug!(reason = %error, "a progress notification was not sent");
                }
            }
        })
    }

    /// A reporter telling each count through `send`.
    fn with_sender<F, S>(send: S) -> Self
    where
        S: Fn(u64, String) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let (latest, counts) = watch::channel(None);
        let (end, ended) = oneshot::channel();
        Self {
            notifier: Arc::new(Notifier(latest)),
            end: Some(end),
            task: tokio::spawn(tell(counts, ended, send)),
        }
    }

    /// What the execution tells of its progress.
    pub(crate) fn progress(&self) -> Arc<dyn Progress> {
        self.notifier.clone()
    }

    /// Tells the last count, if it was not yet (after the interval, within
    /// [`FLUSH_TIMEOUT`]), and stops: once this returns, no notification of this
    /// request is sent any more, so all go out before the answer.
    pub(crate) async fn finish(mut self) {
        if let Some(end) = self.end.take() {
            let _ = end.send(());
        }
        if tokio::time::timeout(FLUSH_TIMEOUT, &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
            let _ = (&mut self.task).await;
        }
    }
}

impl Drop for Reporter {
    /// A request dropped (cancelled) tells no more progress either.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Tells each new count through `send`, at most one per [`MIN_INTERVAL`], until
/// `ended` (then the last count once more, if it was not told yet).
async fn tell<F, S>(mut counts: watch::Receiver<Count>, mut ended: oneshot::Receiver<()>, send: S)
where
    S: Fn(u64, String) -> F,
    F: Future<Output = ()>,
{
    let mut told: Option<u64> = None;
    let mut next = Instant::now();
    let mut end = false;
    loop {
        if !end {
            tokio::select! {
                changed = counts.changed() => end = changed.is_err(),
                _ = &mut ended => end = true,
            }
        }
        let untold = counts
            .borrow()
            .as_ref()
            .is_some_and(|(calls, _)| told != Some(*calls));
        if !untold {
            if end {
                return;
            }
            continue;
        }
        tokio::time::sleep_until(next).await;
        let Some((calls, capability)) = counts.borrow_and_update().clone() else {
            continue;
        };
        send(calls, capability).await;
        told = Some(calls);
        next = Instant::now() + MIN_INTERVAL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Counts told, with when (since the start), on a paused clock.
    #[tokio::test(start_paused = true)]
    async fn at_most_one_per_interval_and_the_last_count_always_told() {
        let start = Instant::now();
        let told: Arc<Mutex<Vec<(u64, String, u128)>>> = Arc::default();
        let sink = told.clone();
        let reporter = Reporter::with_sender(move |calls, capability| {
            let sink = sink.clone();
            async move {
                let at = Instant::now().duration_since(start).as_millis();
                sink.lock().unwrap().push((calls, capability, at));
            }
        });
        let progress = reporter.progress();
        // A burst: the first is told at once, the rest as one, 100 ms later.
        for calls in 1..=5 {
            progress.call_done(calls, "a.b");
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        // A slow call: told at once (the interval went by).
        progress.call_done(6, "c.d");
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The last one, right after: told when the execution ends, after the
        // interval.
        progress.call_done(7, "e.f");
        reporter.finish().await;
        assert_eq!(
            *told.lock().unwrap(),
            [
                (1, "a.b".to_owned(), 0),
                (5, "a.b".to_owned(), 100),
                (6, "c.d".to_owned(), 250),
                (7, "e.f".to_owned(), 350),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_execution_without_calls_tells_nothing() {
        let told: Arc<Mutex<Vec<u64>>> = Arc::default();
        let sink = told.clone();
        let reporter = Reporter::with_sender(move |calls, _| {
            let sink = sink.clone();
            async move { sink.lock().unwrap().push(calls) }
        });
        reporter.finish().await;
        assert!(told.lock().unwrap().is_empty());
    }
}

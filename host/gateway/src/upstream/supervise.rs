//! Keeping upstreams serving: one task per upstream that connects it first, then
//! republishes it when its tools change, and reconnects it (restarting its child)
//! with backoff when it goes away.
//!
//! The supervisor knows nothing of the catalog: it hands each new version of its
//! upstream (or `None` while it is down) to a [`Publish`] callback, which its
//! provider ([`super::provider`]) offers to the registry.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{Notify, oneshot, watch};

use super::config::{CONNECT_TIMEOUT, UpstreamConfig};

/// How long the first reconnection waits; each failure doubles it, up to
/// [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The longest wait between reconnections.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// The shortest time between two relists of an upstream's tools: an upstream
/// sending `notifications/tools/list_changed` in a loop made 113 relists (and
/// catalog rebuilds) in 15 s. Notifications meanwhile make one relist at the end.
const RELIST_INTERVAL: Duration = Duration::from_secs(1);

/// How long stopping an upstream takes at most: its transport waits 3 s after
/// closing the child's stdin and 3 s after SIGTERM (`ChildLines::close`), and
/// SIGKILL needs a moment to land.
pub const STOP_GRACE: Duration = Duration::from_secs(8);

/// What a supervisor keeps serving: an [`Upstream`](super::Upstream) (or, in the tests, a fake
/// whose sessions end, fail and change tools when the test says).
pub trait Supervised: Send + Sync + Sized + 'static {
    /// Connects as `config` says (the supervisor bounds it by [`CONNECT_TIMEOUT`]).
    fn connect(
        config: &UpstreamConfig,
    ) -> impl Future<Output = Result<Connected<Self>, String>> + Send;
    /// The same session with its tools listed again.
    fn relisted(
        &self,
        config: &UpstreamConfig,
    ) -> impl Future<Output = Result<Self, String>> + Send;
    /// Closes the session and waits at most `grace` for it to end (`closed` fires
    /// when it did), then ends what it left behind.
    fn stop(
        &self,
        closed: &mut oneshot::Receiver<()>,
        grace: Duration,
    ) -> impl Future<Output = ()> + Send;
    /// Ends what a session that ended left behind (its child's process group).
    fn end_leftovers(&self);
    /// How many capabilities it serves, for the log.
    fn capability_count(&self) -> usize;
}

/// An upstream that just connected, with what its supervisor watches.
pub struct Connected<S> {
    /// The upstream.
    pub upstream: Arc<S>,
    /// Fires when the session ends (the child exited, the protocol broke, or the
    /// session was closed).
    pub closed: oneshot::Receiver<()>,
    /// Notified on each `notifications/tools/list_changed`.
    pub tools_changed: Arc<Notify>,
}

/// One configured upstream and its first connection, if it succeeded.
pub struct Slot<S> {
    /// As configured.
    pub config: UpstreamConfig,
    /// The first attempt's upstream; `None` when it failed (logged).
    pub first: Option<Connected<S>>,
}

/// Where a supervisor sends each new version of its upstream (`None`: it is down).
/// Returns `false` once nobody is listening (the service is gone): the supervisor
/// then stops. It may block (it rebuilds the catalog), so it is called on a blocking
/// thread.
pub type Publish<S> = Arc<dyn Fn(Option<Arc<S>>) -> bool + Send + Sync>;

/// One connection attempt: the upstream, or why it cannot serve.
type Attempt<S> = Result<Connected<S>, String>;

/// Connects `config` within [`CONNECT_TIMEOUT`].
async fn attempt<S: Supervised>(config: &UpstreamConfig) -> Attempt<S> {
    match tokio::time::timeout(CONNECT_TIMEOUT, S::connect(config)).await {
        Ok(attempt) => attempt,
        Err(_) => Err(format!("no answer within {}s", CONNECT_TIMEOUT.as_secs())),
    }
}

/// Connects `config` for the first time and publishes the outcome (`None`: it
/// failed, logged with the reason), then [`supervise`]s it.
pub async fn run<S: Supervised>(
    config: UpstreamConfig,
    publish: Publish<S>,
    mut stop: watch::Receiver<bool>,
) {
    // A stop while connecting drops the attempt, which kills the child's process
    // group.
    let attempted = tokio::select! {
        attempted = attempt::<S>(&config) => attempted,
        _ = stop.changed() => return,
    };
    let first = match attempted {
        Ok(connected) => {
            connected_log(&config.name, &connected);
            Some(connected)
        }
        Err(reason) => {
            unavailable_log(&config.name, &reason, FIRST_RETRY);
            None
        }
    };
    let upstream = first.as_ref().map(|connected| connected.upstream.clone());
    if !hand_over(&publish, upstream).await {
        return;
    }
    supervise(Slot { config, first }, publish, stop).await;
}

fn connected_log<S: Supervised>(name: &str, connected: &Connected<S>) {
    tracing::info!(upstream = %name, capabilities = connected.upstream.capability_count(), "upstream connected");
}

fn unavailable_log(name: &str, reason: &str, retry: Duration) {
    tracing::error!(upstream = %name, reason = %reason, retry_in_s = retry.as_secs(), "upstream unavailable");
}

/// Hands `upstream` to `publish` on a blocking thread; `false` when the service is
/// gone.
async fn hand_over<S: Supervised>(publish: &Publish<S>, upstream: Option<Arc<S>>) -> bool {
    let publish = publish.clone();
    tokio::task::spawn_blocking(move || publish(upstream))
        .await
        .unwrap_or(false)
}

/// Supervises one upstream until `stop` turns true (or its sender is dropped), or
/// the service is gone: republishes it when its tools change; when its session
/// ends, publishes `None` and reconnects after 1 s, doubling the wait after each
/// failure up to 60 s. `first` was published already (at start). Stopping closes the
/// session and ends the child's process group within [`STOP_GRACE`].
pub async fn supervise<S: Supervised>(
    slot: Slot<S>,
    publish: Publish<S>,
    mut stop: watch::Receiver<bool>,
) {
    let Slot { config, first } = slot;
    let name = config.name.clone();
    let mut retry = FIRST_RETRY;
    let mut next = first.map(|connected| (connected, true));
    loop {
        if let Some((connected, published)) = next.take() {
            let Connected {
                upstream,
                mut closed,
                tools_changed,
            } = connected;
            let mut current = upstream;
            if !published && !hand_over(&publish, Some(current.clone())).await {
                return;
            }
            retry = FIRST_RETRY;
            // When the next relist is due (`None`: no change is pending), and when
            // the last one was: relists are at least RELIST_INTERVAL apart.
            let mut due: Option<tokio::time::Instant> = None;
            let mut last_relist: Option<tokio::time::Instant> = None;
            // After a failed relist, when the next try comes: 1 s, doubling to 60 s.
            let mut relist_retry = RELIST_INTERVAL;
            loop {
                let relist = async move {
                    match due {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = &mut closed => break,
                    _ = stop.changed() => {
                        current.stop(&mut closed, STOP_GRACE).await;
                        return;
                    }
                    () = tools_changed.notified(), if due.is_none() => {
                        let now = tokio::time::Instant::now();
                        due = Some(last_relist.map_or(now, |last| (last + RELIST_INTERVAL).max(now)));
                    }
                    () = relist => {
                        due = None;
                        // This list reflects every change notified so far: a
                        // notification stored meanwhile asks for nothing more.
                        let _ = tools_changed.notified().now_or_never();
                        last_relist = Some(tokio::time::Instant::now());
                        let failure = match tokio::time::timeout(CONNECT_TIMEOUT, current.relisted(&config)).await {
                            Ok(Ok(relisted)) => {
                                current = Arc::new(relisted);
                                relist_retry = RELIST_INTERVAL;
                                tracing::info!(upstream = %name, capabilities = current.capability_count(), "upstream tools changed");
                                if !hand_over(&publish, Some(current.clone())).await {
                                    return;
                                }
                                None
                            }
                            Ok(Err(reason)) => Some(reason),
                            Err(_) => Some(format!("no answer within {}s", CONNECT_TIMEOUT.as_secs())),
                        };
                        // The change still waits to be seen (its notification was
                        // consumed above): try again, less often each time.
                        if let Some(reason) = failure {
                            tracing::warn!(upstream = %name, reason = %reason, retry_in_s = relist_retry.as_secs(), "upstream tools changed, but cannot be listed");
                            due = Some(tokio::time::Instant::now() + relist_retry);
                            relist_retry = (relist_retry * 2).min(MAX_RETRY);
                        }
                    }
                }
            }
            current.end_leftovers();
            tracing::warn!(upstream = %name, retry_in_s = retry.as_secs(), "upstream disconnected");
            if !hand_over(&publish, None).await {
                return;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(retry) => {}
            _ = stop.changed() => return,
        }
        // A stop while connecting drops the attempt, which kills the child's
        // process group.
        let attempted = tokio::select! {
            attempted = attempt::<S>(&config) => attempted,
            _ = stop.changed() => return,
        };
        match attempted {
            Ok(connected) => {
                connected_log(&name, &connected);
                next = Some((connected, false));
            }
            Err(reason) => {
                retry = (retry * 2).min(MAX_RETRY);
                unavailable_log(&name, &reason, retry);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::{BTreeMap, VecDeque};
    use std::sync::Mutex;

    use tokio::task::JoinHandle;

    use crate::upstream::UpstreamTransport;

    /// What a test scripts for its fake upstream, and what happened to it.
    #[derive(Default)]
    struct Script {
        /// What each connect does, in order: `true` connects, `false` fails; when
        /// none is left, a connect never ends.
        connects: VecDeque<bool>,
        /// What happened, at what (paused) time since the test began.
        events: Vec<(Duration, String)>,
        /// Ending the session of each connection (as its child exiting would).
        ends: Vec<oneshot::Sender<()>>,
        /// The tools-changed signal of each connection.
        changes: Vec<Arc<Notify>>,
        /// What each relist does, in order: `false` fails; when none is left, it
        /// succeeds.
        relists: VecDeque<bool>,
        /// Connections made so far.
        versions: u32,
        /// When the test began, on its runtime's paused clock.
        start: Option<tokio::time::Instant>,
    }

    /// The scripts of the tests, by upstream name (tests run on threads of one
    /// process).
    static SCRIPTS: Mutex<BTreeMap<String, Script>> = Mutex::new(BTreeMap::new());

    /// Records `what` for the upstream `name`, at the time since its test began.
    fn record(name: &str, what: String) {
        script(name, |s| {
            let at = s
                .start
                .map_or(Duration::ZERO, |start| tokio::time::Instant::now() - start);
            s.events.push((at, what));
        });
    }

    /// Runs `f` on the script of `name`.
    fn script<T>(name: &str, f: impl FnOnce(&mut Script) -> T) -> T {
        let mut scripts = SCRIPTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(scripts.entry(name.to_owned()).or_default())
    }

    /// Records its being dropped: a connect abandoned.
    struct Dropped(String);

    impl Drop for Dropped {
        fn drop(&mut self) {
            record(&self.0, "connect dropped".to_owned());
        }
    }

    /// One version of a fake upstream.
    struct Fake {
        name: String,
        version: u32,
    }

    impl Supervised for Fake {
        async fn connect(config: &UpstreamConfig) -> Result<Connected<Self>, String> {
            let name = config.name.clone();
            record(&name, "connect".to_owned());
            let Some(connects) = script(&name, |s| s.connects.pop_front()) else {
                let _dropped = Dropped(name);
                return std::future::pending().await;
            };
            if !connects {
                return Err("refused".to_owned());
            }
            let (end, closed) = oneshot::channel();
            let tools_changed = Arc::new(Notify::new());
            let version = script(&name, |s| {
                s.ends.push(end);
                s.changes.push(tools_changed.clone());
                s.versions += 1;
                s.versions
            });
            Ok(Connected {
                upstream: Arc::new(Fake { name, version }),
                closed,
                tools_changed,
            })
        }

        async fn relisted(&self, _config: &UpstreamConfig) -> Result<Self, String> {
            record(&self.name, format!("relist {}", self.version));
            if script(&self.name, |s| s.relists.pop_front()) == Some(false) {
                return Err("refused".to_owned());
            }
            Ok(Fake {
                name: self.name.clone(),
                version: self.version + 1,
            })
        }

        async fn stop(&self, _closed: &mut oneshot::Receiver<()>, _grace: Duration) {
            record(&self.name, format!("stop {}", self.version));
        }

        fn end_leftovers(&self) {
            record(&self.name, format!("leftovers {}", self.version));
        }

        fn capability_count(&self) -> usize {
            0
        }
    }

    fn config(name: &str) -> UpstreamConfig {
        UpstreamConfig {
            name: name.to_owned(),
            transport: UpstreamTransport::Command {
                command: vec!["unused".to_owned()],
                env: BTreeMap::new(),
                cwd: None,
            },
            timeout: None,
            tools: None,
        }
    }

    /// A publisher recording what it is handed.
    fn publisher(name: &str) -> Publish<Fake> {
        let name = name.to_owned();
        Arc::new(move |upstream: Option<Arc<Fake>>| {
            let what = match upstream {
                Some(fake) => format!("publish {}", fake.version),
                None => "publish none".to_owned(),
            };
            record(&name, what);
            true
        })
    }

    /// A supervisor of the fake `name` scripted with `connects`, its first
    /// connection made (`connected`) or not, on the test's paused runtime; the
    /// sender that stops it; and when the test began.
    async fn start(
        name: &str,
        connects: &[bool],
        connected: bool,
    ) -> (JoinHandle<()>, watch::Sender<bool>, tokio::time::Instant) {
        let began = tokio::time::Instant::now();
        script(name, |s| {
            *s = Script {
                connects: connects.iter().copied().collect(),
                start: Some(began),
                ..Script::default()
            }
        });
        let first = if connected {
            Some(
                Fake::connect(&config(name))
                    .await
                    .expect("the first connect"),
            )
        } else {
            None
        };
        let (stop, stopped) = watch::channel(false);
        let slot = Slot {
            config: config(name),
            first,
        };
        let handle = tokio::spawn(supervise(slot, publisher(name), stopped));
        (handle, stop, began)
    }

    /// Waits (in paused time, so at once) until the events of `name` number
    /// `count`; returns them as (seconds, what).
    async fn events(name: &str, count: usize) -> Vec<(f64, String)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3600);
        loop {
            let events = script(name, |s| s.events.clone());
            if events.len() >= count || tokio::time::Instant::now() > deadline {
                return events
                    .into_iter()
                    .map(|(at, what)| (at.as_secs_f64(), what))
                    .collect();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `(seconds, what)` pairs as [`events`] returns them.
    fn expect(list: &[(f64, &str)]) -> Vec<(f64, String)> {
        list.iter()
            .map(|(at, what)| (*at, (*what).to_owned()))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_upstream_is_retried_after_1_2_4_s_up_to_a_minute() {
        let script = [false, false, false, false, false, false, false, false, true];
        let (_handle, _stop, _) = start("backoff", &script, false).await;
        let events = events("backoff", 10).await;
        assert_eq!(
            events,
            expect(&[
                (1.0, "connect"),
                (3.0, "connect"),
                (7.0, "connect"),
                (15.0, "connect"),
                (31.0, "connect"),
                (63.0, "connect"),
                (123.0, "connect"),
                (183.0, "connect"),
                (243.0, "connect"),
                (243.0, "publish 1"),
            ])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_that_ends_is_withdrawn_then_restarted_after_a_second() {
        let (handle, stop, began) = start("restart", &[true, true], true).await;
        let _ = script("restart", |s| s.ends.remove(0)).send(());
        let events_so_far = events("restart", 5).await;
        assert_eq!(
            events_so_far,
            expect(&[
                (0.0, "connect"),
                (0.0, "leftovers 1"),
                (0.0, "publish none"),
                (1.0, "connect"),
                (1.0, "publish 2"),
            ])
        );
        // Stopping stops the serving session, and the supervisor ends.
        tokio::time::sleep_until(began + Duration::from_secs(5)).await;
        let _ = stop.send(true);
        handle.await.expect("the supervisor ends");
        assert_eq!(
            events("restart", 6).await[5..],
            expect(&[(5.0, "stop 2")])[..]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_tools_changed_relists_at_most_once_a_second() {
        let (_handle, _stop, began) = start("flood", &[true], true).await;
        let changes = script("flood", |s| s.changes[0].clone());
        changes.notify_one();
        events("flood", 3).await;
        for _ in 0..100 {
            changes.notify_one();
            tokio::task::yield_now().await;
        }
        tokio::time::sleep_until(began + Duration::from_secs(10)).await;
        assert_eq!(
            events("flood", 5).await,
            expect(&[
                (0.0, "connect"),
                (0.0, "relist 1"),
                (0.0, "publish 2"),
                (1.0, "relist 2"),
                (1.0, "publish 3"),
            ])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_while_connecting_abandons_the_attempt() {
        let (handle, stop, began) = start("connecting", &[], false).await;
        events("connecting", 1).await;
        tokio::time::sleep_until(began + Duration::from_secs(5)).await;
        let _ = stop.send(true);
        handle.await.expect("the supervisor ends");
        assert_eq!(
            events("connecting", 2).await,
            expect(&[(1.0, "connect"), (5.0, "connect dropped")])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_relist_is_tried_again_after_1_then_2_s() {
        let (_handle, _stop, began) = start("relist", &[true], true).await;
        script("relist", |s| s.relists = [false, false].into());
        let changes = script("relist", |s| s.changes[0].clone());
        changes.notify_one();
        tokio::time::sleep_until(began + Duration::from_secs(10)).await;
        assert_eq!(
            events("relist", 5).await,
            expect(&[
                (0.0, "connect"),
                (0.0, "relist 1"),
                (1.0, "relist 1"),
                (3.0, "relist 1"),
                (3.0, "publish 2"),
            ])
        );
    }
}

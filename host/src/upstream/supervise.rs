//! Keeping upstreams serving: the first connection at start, then one supervisor
//! task per upstream that republishes it when its tools change, and reconnects it
//! (restarting its child) with backoff when it goes away.
//!
//! The supervisor knows nothing of the catalog: it hands each new version of its
//! upstream (or `None` while it is down) to a [`Publish`] callback, which the
//! service turns into the same catalog swap as a plugin reload.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;

use super::{CONNECT_TIMEOUT, Upstream, UpstreamConfig};
use crate::wait;

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
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(8);

/// An upstream that just connected, with what its supervisor watches.
pub(crate) struct Connected {
    /// The upstream.
    pub upstream: Arc<Upstream>,
    /// Fires when the session ends (the child exited, the protocol broke, or the
    /// session was closed).
    pub closed: oneshot::Receiver<()>,
    /// Notified on each `notifications/tools/list_changed`.
    pub tools_changed: Arc<Notify>,
}

/// One configured upstream and its first connection, if it succeeded.
pub(crate) struct Slot {
    /// As configured.
    pub config: UpstreamConfig,
    /// The first attempt's upstream; `None` when it failed (logged).
    pub first: Option<Connected>,
}

/// Where a supervisor sends each new version of its upstream (`None`: it is down).
/// Returns `false` once nobody is listening (the service is gone): the supervisor
/// then stops. It may block (it rebuilds the catalog), so it is called on a blocking
/// thread.
pub(crate) type Publish = Arc<dyn Fn(Option<Arc<Upstream>>) -> bool + Send + Sync>;

/// Upstreams connecting in the background ([`connect_all`]).
pub(crate) struct Connecting {
    started: Instant,
    pending: Vec<(UpstreamConfig, Option<JoinHandle<Attempt>>)>,
}

/// One connection attempt: the upstream, or why it cannot serve.
type Attempt = Result<Connected, String>;

/// Connects `config` within [`CONNECT_TIMEOUT`].
async fn attempt(config: &UpstreamConfig) -> Attempt {
    match tokio::time::timeout(CONNECT_TIMEOUT, Upstream::connect(config)).await {
        Ok(attempt) => attempt,
        Err(_) => Err(format!("no answer within {}s", CONNECT_TIMEOUT.as_secs())),
    }
}

/// Starts connecting every upstream at once on the runtime that drives host waits
/// (so their sessions outlive whoever asked).
pub(crate) fn connect_all(configs: &[UpstreamConfig]) -> Connecting {
    let pending = configs
        .iter()
        .map(|config| {
            let owned = config.clone();
            let handle = wait::spawn(async move { attempt(&owned).await });
            (config.clone(), handle)
        })
        .collect();
    Connecting {
        started: Instant::now(),
        pending,
    }
}

impl Connecting {
    /// Waits for every upstream's first attempt; a failure is logged with the
    /// reason, and its supervisor will try again.
    pub(crate) fn finish(self) -> Vec<Slot> {
        // Each attempt ends by its own timeout; this only guards against a task that
        // never ends.
        let deadline = self.started + CONNECT_TIMEOUT + Duration::from_secs(1);
        let mut slots = Vec::with_capacity(self.pending.len());
        for (config, handle) in self.pending {
            let outcome = match handle {
                Some(handle) => match wait::until(deadline, None, handle) {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(error)) => Err(format!("the connecting task failed: {error}")),
                    Err(_) => Err("no answer in time".to_owned()),
                },
                None => Err("no runtime to connect on".to_owned()),
            };
            let first = match outcome {
                Ok(connected) => {
                    connected_log(&config.name, &connected);
                    Some(connected)
                }
                Err(reason) => {
                    unavailable_log(&config.name, &reason, FIRST_RETRY);
                    None
                }
            };
            slots.push(Slot { config, first });
        }
        slots
    }
}

fn connected_log(name: &str, connected: &Connected) {
    tracing::info!(upstream = %name, capabilities = connected.upstream.capability_count(), "upstream connected");
}

fn unavailable_log(name: &str, reason: &str, retry: Duration) {
    tracing::error!(upstream = %name, reason = %reason, retry_in_s = retry.as_secs(), "upstream unavailable");
}

/// Hands `upstream` to `publish` on a blocking thread; `false` when the service is
/// gone.
async fn hand_over(publish: &Publish, upstream: Option<Arc<Upstream>>) -> bool {
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
pub(crate) async fn supervise(slot: Slot, publish: Publish, mut stop: watch::Receiver<bool>) {
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
                        last_relist = Some(tokio::time::Instant::now());
                        match tokio::time::timeout(CONNECT_TIMEOUT, current.relisted(&config)).await {
                            Ok(Ok(relisted)) => {
                                current = Arc::new(relisted);
                                tracing::info!(upstream = %name, capabilities = current.capability_count(), "upstream tools changed");
                                if !hand_over(&publish, Some(current.clone())).await {
                                    return;
                                }
                            }
                            Ok(Err(reason)) => tracing::warn!(upstream = %name, reason = %reason, "upstream tools changed, but cannot be listed"),
                            Err(_) => tracing::warn!(upstream = %name, "upstream tools changed, but listing them took too long"),
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
            attempted = attempt(&config) => attempted,
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

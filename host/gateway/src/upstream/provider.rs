//! One upstream MCP server as a capability-source provider: started, it connects
//! in the background and its supervisor ([`super::supervise`]) offers each new
//! version of it (while it restarts, the last one keeps its names); stopped, it
//! closes the session and ends the child.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::client::Upstream;
use super::config::UpstreamConfig;
use super::gate::UpstreamGate;
use super::names::ID_PREFIX;
use super::supervise::{Publish, run};
use crate::metrics::Metrics;
use crate::source::{Accepted, CapabilitySource, Offer, Provider, Publisher, Reserved};
use crate::wait;

/// One configured upstream, as [`Provider`].
pub struct UpstreamProvider {
    config: UpstreamConfig,
    /// `upstream <name>`.
    name: String,
    metrics: Arc<Metrics>,
    /// Tells the supervisor to close the session and stop.
    stop: watch::Sender<bool>,
    /// The supervisor, once started.
    task: Mutex<Option<JoinHandle<()>>>,
    /// Whether a session of it serves now.
    up: Arc<AtomicBool>,
    /// Until open, its child is not started ([`UpstreamGate`]).
    gate: Option<UpstreamGate>,
}

impl UpstreamProvider {
    /// The upstream `config` describes; not connected before [`Provider::start`].
    pub fn new(config: UpstreamConfig, metrics: Arc<Metrics>, gate: Option<UpstreamGate>) -> Self {
        Self {
            name: Self::provider_name(&config.name),
            config,
            metrics,
            stop: watch::channel(false).0,
            task: Mutex::new(None),
            up: Arc::new(AtomicBool::new(false)),
            gate,
        }
    }

    /// The provider name of the upstream named `upstream` (`upstream git`).
    pub fn provider_name(upstream: &str) -> String {
        format!("upstream {upstream}")
    }

    /// Its name as configured.
    pub fn upstream(&self) -> &str {
        &self.config.name
    }

    /// Its configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// Whether a session of it serves now (not while it connects or restarts).
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }
}

impl Provider for UpstreamProvider {
    fn name(&self) -> &str {
        &self.name
    }

    /// Its name as the root of capability names and its `mcp:<name>/` IDs, so that
    /// no plugin takes them while it is down.
    fn reserved(&self) -> Reserved {
        Reserved::named(&self.config.name, ID_PREFIX)
    }

    /// Connects in the background; each version the supervisor publishes is
    /// offered. When a session ends, its names keep serving (nothing is offered):
    /// calls of them fail at once as unavailable until it is back, so an agent
    /// never takes a restart for a name it got wrong. Only a new list (after the
    /// restart, or a relist) changes its names.
    fn start(self: Arc<Self>, publisher: Publisher) {
        // Nothing is known of it until its first connection: programs naming it
        // (and searches) wait for that, bounded by the service's startup wait,
        // and nothing else does.
        let _ = publisher.offer(Offer::starting());
        let name = self.config.name.clone();
        let metrics = self.metrics.clone();
        self.metrics.upstream(&name, false);
        // Whether a version of it was offered: a session's end then keeps it.
        let offered = Arc::new(AtomicBool::new(false));
        let up = self.up.clone();
        let offer = move |upstream: Option<Arc<Upstream>>| {
            let serving = upstream.is_some();
            // A provider stopped (removed, or replaced by a new one of the same
            // name) says nothing more: not even its gauge, which is no longer its.
            let report = |metrics: &Metrics| {
                metrics.upstream(&name, serving);
                up.store(serving, Ordering::Release);
            };
            if upstream.is_none() && offered.load(Ordering::Acquire) {
                report(&metrics);
                return true;
            }
            offered.store(serving, Ordering::Release);
            let sources = upstream
                .into_iter()
                .map(|upstream| upstream as Arc<dyn CapabilitySource>)
                .collect();
            let accepted = publisher.offer(Offer {
                sources,
                failures: Vec::new(),
                starting: false,
            });
            if matches!(accepted, Ok(Accepted::Gone)) {
                return false;
            }
            report(&metrics);
            match accepted {
                Ok(Accepted::Serving(assembly)) => {
                    tracing::info!(upstream = %name, capabilities = assembly.capabilities, "catalog updated for an upstream");
                    true
                }
                Ok(Accepted::Held | Accepted::Gone) => true,
                // Logged; the last catalog serves and the supervisor goes on.
                Err(_) => true,
            }
        };
        let publish: Publish<Upstream> = Arc::new(offer.clone());
        let (config, gate, mut stop) = (
            self.config.clone(),
            self.gate.clone(),
            self.stop.subscribe(),
        );
        let task = wait::spawn(async move {
            if let Some(gate) = gate {
                tokio::select! {
                    () = gate.opened() => {}
                    _ = stop.wait_for(|stop| *stop) => return,
                }
            }
            run(config, publish, stop).await
        });
        if task.is_none() {
            tracing::error!(upstream = %self.config.name, "no runtime to connect on");
            offer(None);
        }
        *self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = task;
    }

    fn stop(&self, deadline: Instant) {
        self.stop.send_replace(true);
        if deadline <= Instant::now() {
            return;
        }
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = wait::until(deadline, None, task);
        }
    }
}

//! [`UpstreamGate`]: when the upstreams of a service may start their children.

use tokio::sync::watch;

/// Holds every upstream of a service from starting its child until it is
/// opened. A stdio server opens it when a client speaks, so that a start with
/// stdin already at its end (run to fill the cache) starts no upstream. The
/// upstreams offer `starting` all the same: nothing waits on them but programs
/// that name them, at most the startup wait.
#[derive(Clone, Debug)]
pub struct UpstreamGate {
    open: watch::Sender<bool>,
}

impl UpstreamGate {
    /// A gate that is closed.
    pub fn closed() -> Self {
        Self {
            open: watch::Sender::new(false),
        }
    }

    /// Lets every upstream held by the gate start now, and those added later at
    /// once. Opening it again does nothing.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Whether it was opened.
    pub fn is_open(&self) -> bool {
        *self.open.borrow()
    }

    /// Returns once the gate is open.
    pub async fn opened(&self) {
        let mut open = self.open.subscribe();
        // The sender is `self`'s own: it cannot be dropped while this waits.
        let _ = open.wait_for(|open| *open).await;
    }
}

//! Hot reload: watch the plugins folder and reload the service when a plugin or its
//! sidecar is added, replaced or removed.
//!
//! Events are debounced: a reload starts once plugins and sidecars have been quiet
//! for [`DEBOUNCE`], so an operator copying a large file causes one reload, not one
//! per write; and at the latest [`MAX_DELAY`] after the first event, so that a file
//! written without pause (or other files of the folder churning) cannot postpone it.
//! A copy slower than that may still be read half-written; the load fails cleanly,
//! the last good version keeps serving, and the copy's next write triggers another
//! reload. A reload that failed for a reason that may pass (out of file descriptors)
//! is tried again after [`RETRY_DELAY`].

use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use crate::Service;
use crate::plugins::SIDECAR_EXTENSION;

/// How long the folder must be quiet before a reload starts.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// The latest a reload starts after the first event that called for it.
pub const MAX_DELAY: Duration = Duration::from_secs(2);

/// How long after a reload that failed for a passing reason it is tried again.
pub const RETRY_DELAY: Duration = Duration::from_secs(1);

/// A running watch; dropping it stops watching (the reload thread ends after the
/// reload in progress, if any).
pub struct Watch {
    _watcher: RecommendedWatcher,
}

/// Starts watching `service`'s plugins folder. The watch holds the service weakly: it
/// never keeps a stopped server alive.
///
/// # Errors
///
/// When the folder cannot be watched (e.g. the inotify watch limit is reached).
pub fn watch(service: &Arc<Service>) -> Result<Watch, notify::Error> {
    let dir = service.plugins_dir();
    let (events, received) = channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        // The receiver is gone only when the reload thread ended; nothing to tell.
        let _ = events.send(event);
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    let weak = Arc::downgrade(service);
    std::thread::Builder::new()
        .name("codemode-watch".into())
        .spawn(move || reload_loop(&dir, &received, &weak))
        .map_err(|e| notify::Error::io(e).add_path(service.plugins_dir()))?;
    Ok(Watch { _watcher: watcher })
}

/// When a reload is due: [`DEBOUNCE`] after the last relevant event, and at most
/// [`MAX_DELAY`] after the first. The one debouncer of every watched file: the
/// plugins folder here, the tokens and policy files in the binary's secrets reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Debounce {
    quiet_at: Instant,
    latest: Instant,
}

impl Debounce {
    /// A relevant event at `now` started the wait.
    pub fn new(now: Instant) -> Self {
        Self {
            quiet_at: now + DEBOUNCE,
            latest: now + MAX_DELAY,
        }
    }

    /// Another event at `now`: a relevant one restarts the quiet period (never past
    /// the latest); others change nothing.
    pub fn event(&mut self, relevant: bool, now: Instant) {
        if relevant {
            self.quiet_at = now + DEBOUNCE;
        }
    }

    /// How long to wait for more events; `None` when the reload is due.
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        let due = self.quiet_at.min(self.latest);
        (due > now).then(|| due - now)
    }
}

/// Waits for a relevant event, waits for quiet, reloads (again after a passing
/// failure); until the watcher or the service is gone.
fn reload_loop(dir: &Path, events: &Receiver<notify::Result<Event>>, service: &Weak<Service>) {
    let mut retry = false;
    loop {
        let due = if retry {
            // A failure that may pass: reload again after a pause, or after the next
            // change settles, whichever is first.
            match events.recv_timeout(RETRY_DELAY) {
                Ok(event) if relevant(dir, &event) => settle(dir, events, Instant::now()),
                Ok(_) | Err(RecvTimeoutError::Timeout) => true,
                Err(RecvTimeoutError::Disconnected) => false,
            }
        } else {
            let Ok(first) = events.recv() else {
                return;
            };
            if !relevant(dir, &first) {
                continue;
            }
            settle(dir, events, Instant::now())
        };
        if !due {
            return;
        }
        let Some(service) = service.upgrade() else {
            return;
        };
        retry = match service.reload() {
            Ok(reloaded) => reloaded.retry,
            Err(error) => {
                tracing::warn!(reason = %error, retry_ms = RETRY_DELAY.as_millis() as u64, "reload failed; the current catalog keeps serving");
                true
            }
        };
    }
}

/// Waits until the reload that a relevant event at `first` called for is due
/// ([`Debounce`]). `false` when the watcher is gone.
fn settle(dir: &Path, events: &Receiver<notify::Result<Event>>, first: Instant) -> bool {
    let mut debounce = Debounce::new(first);
    while let Some(wait) = debounce.remaining(Instant::now()) {
        match events.recv_timeout(wait) {
            Ok(event) => debounce.event(relevant(dir, &event), Instant::now()),
            Err(RecvTimeoutError::Timeout) => break,
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
    true
}

/// Whether `event` may change what the folder serves: a `.wasm` or sidecar directly
/// in `dir` was created, written, renamed or removed. Reads and opens are not; an
/// error of the watcher is logged and triggers a rescan (events may have been lost).
fn relevant(dir: &Path, event: &notify::Result<Event>) -> bool {
    let event = match event {
        Ok(event) => event,
        Err(error) => {
            tracing::warn!(reason = %error, "watching the plugins folder: rescanning");
            return true;
        }
    };
    let kind = match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    };
    kind && event.paths.iter().any(|p| plugin_path(dir, p))
}

/// Whether `path` is a plugin or a sidecar in `dir`.
fn plugin_path(dir: &Path, path: &Path) -> bool {
    let in_dir = path.parent().is_some_and(|p| same_dir(p, dir));
    let extension = path
        .extension()
        .is_some_and(|e| e == "wasm" || e == SIDECAR_EXTENSION);
    in_dir && extension
}

/// Whether `a` and `b` name the same folder (events may carry a canonical path for a
/// folder given as a relative one).
fn same_dir(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind, RemoveKind};
    use std::path::PathBuf;

    fn event(kind: EventKind, path: &str) -> notify::Result<Event> {
        Ok(Event::new(kind).add_path(PathBuf::from(path)))
    }

    #[test]
    fn only_plugin_and_sidecar_changes_in_the_folder_are_relevant() {
        let dir = Path::new("/plugins");
        let cases = [
            (EventKind::Create(CreateKind::File), "/plugins/a.wasm", true),
            (EventKind::Modify(ModifyKind::Any), "/plugins/a.toml", true),
            (EventKind::Remove(RemoveKind::File), "/plugins/a.wasm", true),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                "/plugins/a.wasm",
                true,
            ),
            (
                EventKind::Access(AccessKind::Open(AccessMode::Any)),
                "/plugins/a.wasm",
                false,
            ),
            (
                EventKind::Create(CreateKind::File),
                "/plugins/a.wasm.tmp",
                false,
            ),
            (
                EventKind::Create(CreateKind::File),
                "/plugins/sub/a.wasm",
                false,
            ),
            (
                EventKind::Modify(ModifyKind::Any),
                "/plugins/README.md",
                false,
            ),
        ];
        for (kind, path, want) in cases {
            assert_eq!(relevant(dir, &event(kind, path)), want, "{kind:?} {path}");
        }
        let error = Err(notify::Error::generic("queue overflow"));
        assert!(relevant(dir, &error));
    }

    #[test]
    fn a_reload_is_due_after_quiet_and_at_the_latest_after_max_delay() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut debounce = Debounce::new(start);
        assert_eq!(debounce.remaining(start), Some(DEBOUNCE));
        // Quiet for the debounce: due.
        assert_eq!(debounce.remaining(at(300)), None);
        // A relevant event restarts the quiet period.
        debounce.event(true, at(200));
        assert_eq!(
            debounce.remaining(at(300)),
            Some(Duration::from_millis(200))
        );
        assert_eq!(debounce.remaining(at(500)), None);
        // Other files written every 100 ms postponed a reload for 15 s: now they
        // change nothing.
        let mut debounce = Debounce::new(start);
        for ms in (100..3000).step_by(100) {
            debounce.event(false, at(ms));
        }
        assert_eq!(debounce.remaining(at(300)), None);
        // A plugin written without pause still reloads 2 s after the first event.
        let mut debounce = Debounce::new(start);
        for ms in (100..=1900).step_by(100) {
            debounce.event(true, at(ms));
            assert!(debounce.remaining(at(ms)).is_some(), "{ms}");
        }
        assert_eq!(
            debounce.remaining(at(1900)),
            Some(Duration::from_millis(100))
        );
        assert_eq!(debounce.remaining(at(2000)), None);
    }
}

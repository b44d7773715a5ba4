//! Hot reload: watch the plugins folder and reload the service when a plugin or its
//! sidecar is added, replaced or removed.
//!
//! Events are debounced: a reload starts once the folder has been quiet for
//! [`DEBOUNCE`], so an operator copying a large file causes one reload, not one per
//! write. A copy slower than that may still be read half-written; the load fails
//! cleanly, the last good version keeps serving, and the copy's next write triggers
//! another reload.

use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Weak};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use crate::Service;
use crate::plugins::SIDECAR_EXTENSION;

/// How long the folder must be quiet before a reload starts.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

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

/// Waits for a relevant event, waits for quiet, reloads; until the watcher or the
/// service is gone.
fn reload_loop(dir: &Path, events: &Receiver<notify::Result<Event>>, service: &Weak<Service>) {
    loop {
        let Ok(first) = events.recv() else {
            return;
        };
        if !relevant(dir, &first) {
            continue;
        }
        loop {
            match events.recv_timeout(DEBOUNCE) {
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        let Some(service) = service.upgrade() else {
            return;
        };
        if let Err(error) = service.reload() {
            tracing::warn!(reason = %error, "reload failed; the current catalog keeps serving");
        }
    }
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
}

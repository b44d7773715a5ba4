//! Reloading the tokens file, the policy and the config file while serving,
//! without a restart: on SIGHUP, and when one of their files changes (what a
//! config file's reload applies: `reconfig.rs`).
//!
//! A reload reads and parses (or compiles) the whole new set first and swaps it in
//! only when that succeeded; otherwise the set in force stays and the reason is
//! logged. A request is resolved against the tokens in place when it arrives, and
//! each native call is decided whole by the policy in place when it is asked
//! (`Replaceable`), so nothing under way sees half of a set.
//!
//! Files are watched through their folders (editors and secret managers replace a
//! file by renaming a new one over it, which a watch on the file itself would
//! lose). Changes are debounced by the plugins folder's [`Debounce`]: one reload
//! once they have been quiet for 300 ms, and at the latest 2 s after the first (a
//! file rewritten without pause cannot hold a revocation back).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use codemode_server::authz::{RegoAuthorizer, Replaceable, Tokens};
use codemode_server::watch::Debounce;
use codemode_server::{ConfigFile, Service};
use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use crate::assemble::{ConfigError, compile_policy, read_tokens};
use crate::cli::Cli;
use crate::reconfig::ConfigReload;

/// What can be reloaded: the tokens file and the policy modules, each with where the
/// new set goes.
pub(crate) struct Reloadable {
    /// `--tokens`: the file and the set in force.
    pub tokens: Option<(PathBuf, Arc<ArcSwap<Tokens>>)>,
    /// `--policy`: the modules, the decisions, and the policy in force.
    pub policy: Option<PolicyFiles>,
    /// `--config`: the file, and where its settings go.
    pub config: Option<ConfigReload>,
    /// Set while a reload's thread reads the files.
    pub reading: Arc<AtomicBool>,
    /// The service once loaded, which counts each reload's outcome.
    pub service: Arc<OnceLock<Arc<Service>>>,
}

/// The policy's modules, what it decides, and where a new version goes.
pub(crate) struct PolicyFiles {
    /// `--policy`.
    pub paths: Vec<PathBuf>,
    /// `--policy-decision`.
    pub decision: String,
    /// `--visibility-decision`.
    pub visibility: Option<String>,
    /// `--quota-decision`.
    pub quota: Option<String>,
    /// The policy in force.
    pub policy: Arc<Replaceable>,
}

/// How long one reload may take to read and compile its files. Files are regular
/// (a FIFO or a device is refused without waiting) and capped at 16 MiB, so only a
/// hanging file system or a pathological policy gets near it.
const RELOAD_DEADLINE: Duration = Duration::from_secs(30);

/// Why a reload happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// SIGHUP.
    Signal,
    /// One of the files changed.
    Changed,
}

/// Reloading in progress: dropping it stops watching the files (SIGHUP is still
/// handled, and logged, until the runtime ends).
pub(crate) struct Reloading {
    _watcher: Option<RecommendedWatcher>,
}

impl Reloadable {
    /// Every file a reload reads.
    fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self.tokens.iter().map(|(path, _)| path.clone()).collect();
        if let Some(policy) = &self.policy {
            files.extend(policy.paths.iter().cloned());
        }
        files.extend(self.config.iter().map(|config| config.path().to_owned()));
        files
    }

    /// Reads everything again and swaps in each set that parsed; logs each outcome.
    /// The files are read and compiled on a thread of their own, waited for at most
    /// [`RELOAD_DEADLINE`]: a read that hangs (a file on a dead network mount) costs
    /// that one reload, not every later one.
    fn reload(&self, cause: Cause) {
        if cause == Cause::Signal
            && self.tokens.is_none()
            && self.policy.is_none()
            && self.config.is_none()
        {
            tracing::info!("SIGHUP: nothing to reload (no --tokens, no --policy, no --config)");
            return;
        }
        let cause = match cause {
            Cause::Signal => "SIGHUP",
            Cause::Changed => "file changed",
        };
        if self.reading.load(Ordering::Acquire) {
            tracing::error!(
                cause,
                "reload skipped: an earlier reload is still reading its files; the sets in force stay"
            );
            return;
        }
        let tokens_file = self.tokens.as_ref().map(|(path, _)| path.clone());
        let policy_files = self.policy.as_ref().map(|files| {
            (
                files.paths.clone(),
                files.decision.clone(),
                files.visibility.clone(),
                files.quota.clone(),
            )
        });
        let config_args = self.config.as_ref().map(ConfigReload::args);
        let (sender, receiver) = sync_channel(1);
        let reading = self.reading.clone();
        reading.store(true, Ordering::Release);
        let started = std::thread::Builder::new()
            .name("codemode-secrets-read".into())
            .spawn(move || {
                let read = Read {
                    tokens: tokens_file.map(|path| read_tokens(&path)),
                    policy: policy_files.map(|(paths, decision, visibility, quota)| {
                        compile_policy(&paths, &decision, visibility.as_deref(), quota.as_deref())
                    }),
                    config: config_args.map(ConfigReload::read),
                };
                reading.store(false, Ordering::Release);
                // The reload stopped waiting past its deadline: nobody applies it.
                let _ = sender.send(read);
            });
        if let Err(error) = started {
            self.reading.store(false, Ordering::Release);
            tracing::error!(reason = %error, cause, "reload failed: no thread to read the files on; the sets in force stay");
            return;
        }
        match receiver.recv_timeout(RELOAD_DEADLINE) {
            Ok(read) => self.apply(read, cause),
            Err(_) => {
                tracing::error!(
                    deadline_s = RELOAD_DEADLINE.as_secs(),
                    cause,
                    "reload failed: reading the files took longer than its deadline; the sets in force stay"
                );
                for (file, given) in [
                    (ConfigFile::Tokens, self.tokens.is_some()),
                    (ConfigFile::Policy, self.policy.is_some()),
                    (ConfigFile::Config, self.config.is_some()),
                ] {
                    if given {
                        self.count(file, false);
                    }
                }
            }
        }
    }

    /// Counts one reload of `file` (`/metrics`), once the service serves.
    fn count(&self, file: ConfigFile, ok: bool) {
        if let Some(service) = self.service.get() {
            service.config_reloaded(file, ok);
        }
    }

    /// Swaps in each set of `read` that parsed; logs each outcome.
    fn apply(&self, read: Read, cause: &str) {
        if let (Some((path, tokens)), Some(outcome)) = (&self.tokens, read.tokens) {
            match outcome {
                Ok(new) => {
                    let subjects = new.len();
                    tokens.store(Arc::new(new));
                    tracing::info!(file = %path.display(), subjects, cause, "tokens reloaded");
                    self.count(ConfigFile::Tokens, true);
                }
                Err(error) => {
                    tracing::error!(reason = %error, cause, "tokens reload failed; the tokens in force stay");
                    self.count(ConfigFile::Tokens, false);
                }
            }
        }
        if let (Some(files), Some(outcome)) = (&self.policy, read.policy) {
            match outcome {
                Ok(new) => {
                    files.policy.replace(Box::new(new));
                    tracing::info!(modules = files.paths.len(), decision = %files.decision, cause, "policy reloaded");
                    self.count(ConfigFile::Policy, true);
                }
                Err(error) => {
                    tracing::error!(reason = %error, cause, "policy reload failed; the policy in force keeps deciding");
                    self.count(ConfigFile::Policy, false);
                }
            }
        }
        if let (Some(config), Some(outcome)) = (&self.config, read.config) {
            config.apply(outcome, cause);
        }
    }
}

/// What one reload read: each set, or why it could not be had.
struct Read {
    tokens: Option<Result<Tokens, ConfigError>>,
    policy: Option<Result<RegoAuthorizer, ConfigError>>,
    config: Option<Result<Cli, String>>,
}

/// Starts reloading `reloadable` on SIGHUP (a task on `runtime`) and when its files
/// change (a watcher and a thread). SIGHUP is handled even when there is nothing to
/// reload, so that it never ends the server.
///
/// # Errors
///
/// When a file's folder cannot be watched or the thread cannot start.
pub(crate) fn start(
    reloadable: Reloadable,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<Reloading> {
    let files: Vec<PathBuf> = reloadable
        .files()
        .iter()
        .map(|file| std::path::absolute(file).unwrap_or_else(|_| file.clone()))
        .collect();
    let (causes, received) = channel();
    // The handler is installed here, not when the task first runs: a
    // current-thread runtime (stdio) runs its tasks only once it serves, and a
    // SIGHUP while the plugins load must not end the server either.
    let hangups = {
        let _entered = runtime.enter();
        hangups()
    };
    runtime.spawn(on_sighup(hangups, causes.clone()));
    let watcher = if files.is_empty() {
        None
    } else {
        let watched = files.clone();
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
            if relevant(&watched, &event) {
                // The receiver is gone only when the reload thread ended.
                let _ = causes.send(Cause::Changed);
            }
        })?;
        let mut folders: Vec<&Path> = files.iter().filter_map(|f| f.parent()).collect();
        folders.sort();
        folders.dedup();
        for folder in folders {
            watcher.watch(folder, RecursiveMode::NonRecursive)?;
        }
        Some(watcher)
    };
    std::thread::Builder::new()
        .name("codemode-secrets".into())
        .spawn(move || reload_loop(&reloadable, &received))?;
    Ok(Reloading { _watcher: watcher })
}

/// The stream of SIGHUPs, its handler installed from now on (in a runtime's
/// context); `None`, logged, when it cannot be.
#[cfg(unix)]
fn hangups() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    signal(SignalKind::hangup())
        .inspect_err(|error| {
            tracing::warn!(reason = %error, "cannot handle SIGHUP; reload by changing the files");
        })
        .ok()
}

/// No SIGHUP off Unix.
#[cfg(not(unix))]
fn hangups() -> Option<()> {
    None
}

/// Sends [`Cause::Signal`] on every SIGHUP, for as long as the runtime runs.
#[cfg(unix)]
async fn on_sighup(hangups: Option<tokio::signal::unix::Signal>, causes: Sender<Cause>) {
    let Some(mut hangups) = hangups else {
        return;
    };
    while hangups.recv().await.is_some() {
        if causes.send(Cause::Signal).is_err() {
            return;
        }
    }
}

/// No SIGHUP off Unix.
#[cfg(not(unix))]
async fn on_sighup(_hangups: Option<()>, _causes: Sender<Cause>) {}

/// Reloads on each cause; changes are debounced, a signal reloads at once. Ends when
/// every sender is gone.
fn reload_loop(reloadable: &Reloadable, causes: &Receiver<Cause>) {
    while let Ok(cause) = causes.recv() {
        let cause = match cause {
            Cause::Signal => Cause::Signal,
            Cause::Changed => settle(causes),
        };
        reloadable.reload(cause);
    }
}

/// Waits until the reload a change called for is due ([`Debounce`]); a signal
/// meanwhile wins.
fn settle(causes: &Receiver<Cause>) -> Cause {
    let mut cause = Cause::Changed;
    let mut debounce = Debounce::new(Instant::now());
    while let Some(wait) = debounce.remaining(Instant::now()) {
        match causes.recv_timeout(wait) {
            Ok(Cause::Signal) => cause = Cause::Signal,
            Ok(Cause::Changed) => debounce.event(true, Instant::now()),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
        }
    }
    cause
}

/// Whether `event` may have changed one of `files` (absolute paths): a write, a
/// creation, a rename or a removal naming one of them, or the swap of a folder
/// Kubernetes mounts a Secret or ConfigMap in (kubelet renames `..data`, a link
/// the files point through, so no event names the files themselves).
fn relevant(files: &[PathBuf], event: &notify::Result<Event>) -> bool {
    let Ok(event) = event else {
        // The watcher lost events: reading again is the safe answer.
        return true;
    };
    let changes = match event.kind {
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Any => true,
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) | EventKind::Other => false,
    };
    let kubelet_swap = |path: &PathBuf| {
        path.file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with(".."))
            && files.iter().any(|file| file.parent() == path.parent())
    };
    changes
        && event
            .paths
            .iter()
            .any(|path| files.contains(path) || kubelet_swap(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind, RenameMode};

    fn event(kind: EventKind, path: &str) -> notify::Result<Event> {
        Ok(Event::new(kind).add_path(PathBuf::from(path)))
    }

    #[test]
    fn only_changes_to_the_watched_files_are_relevant() {
        let files = [PathBuf::from("/etc/codemode/tokens")];
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::To));
        assert!(relevant(&files, &event(rename, "/etc/codemode/tokens")));
        assert!(relevant(
            &files,
            &event(EventKind::Create(CreateKind::File), "/etc/codemode/tokens")
        ));
        assert!(relevant(
            &files,
            &event(
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                "/etc/codemode/tokens"
            )
        ));
        // Another file of the folder, or only reading the file.
        assert!(!relevant(
            &files,
            &event(rename, "/etc/codemode/tokens.tmp")
        ));
        assert!(!relevant(
            &files,
            &event(
                EventKind::Access(AccessKind::Close(AccessMode::Read)),
                "/etc/codemode/tokens"
            )
        ));
        // kubelet's swap of a mounted Secret, beside the file.
        assert!(relevant(&files, &event(rename, "/etc/codemode/..data")));
        assert!(!relevant(&files, &event(rename, "/var/other/..data")));
        // Lost events: read again.
        assert!(relevant(&files, &Err(notify::Error::generic("overflow"))));
    }

    #[test]
    fn changes_settle_and_a_signal_meanwhile_wins() {
        let (causes, received) = channel();
        causes.send(Cause::Changed).expect("send");
        assert_eq!(settle(&received), Cause::Changed);
        causes.send(Cause::Changed).expect("send");
        causes.send(Cause::Signal).expect("send");
        assert_eq!(settle(&received), Cause::Signal);
    }

    #[test]
    fn changes_without_pause_settle_at_the_latest_after_max_delay() {
        // A file rewritten every 50 ms for up to 20 s: before, the reload waited for
        // 300 ms of quiet that never came, and a revoked token stayed valid.
        let (causes, received) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flooding = stop.clone();
        let flood = std::thread::spawn(move || {
            for _ in 0..400 {
                if flooding.load(Ordering::Acquire) || causes.send(Cause::Changed).is_err() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        });
        assert_eq!(settle(&received), Cause::Changed);
        stop.store(true, Ordering::Release);
        assert!(
            flood.join().expect("the flood's thread"),
            "settled only after the flood ended"
        );
    }
}

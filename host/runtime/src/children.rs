//! Child processes (upstream MCP servers) never outlive the server.
//!
//! An upstream child may start children of its own (`npx` starts `node`, a shell
//! script starts its server), and any of them may ignore SIGTERM or leave the
//! child's session. So:
//! - each child leads a process group of its own ([`prepare`]), and stopping an
//!   upstream ends the whole group: SIGTERM, then SIGKILL after a grace
//!   ([`signal_group_terminate`], [`kill_group`]; `upstream/lines.rs` waits);
//! - each child gets `PR_SET_PDEATHSIG` = SIGKILL, so a server that is SIGKILLed
//!   (or crashes) takes its children along;
//! - the binary makes the server a child subreaper ([`become_subreaper`]): a
//!   grandchild orphaned by its parent (one that left the group with `setsid`)
//!   becomes the server's child instead of init's: [`reap_adopted`] reaps those
//!   that exit while the server runs (every few seconds; never a child the
//!   server started, which tokio or std waits for: [`spawn_tokio`], [`spawn_std`]
//!   remember those), and at the end [`end_orphans`] kills and reaps the rest.
//!
//! The death signal is tied to the thread that started the child, not the
//! process: children are started on the one long-lived thread of the
//! connections runtime (`wait::spawn`), which ends only with the process.

use std::time::{Duration, Instant};

/// How often a wait for a process group to empty looks again.
const POLL: Duration = Duration::from_millis(10);

/// Makes `command` start its child as the leader of a new process group, with
/// SIGKILL as its parent-death signal (Linux; elsewhere only the group). The
/// signal follows the thread that starts the child: start it from a thread that
/// lives as long as the child should (or that waits for it).
pub fn prepare(command: &mut std::process::Command) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    #[cfg(target_os = "linux")]
    linux::die_with_parent(command);
}

/// Sends SIGKILL to every process of group `group` at once (nothing when it has
/// none left).
pub fn kill_group(group: u32) {
    signal_group(group, Signal::Kill);
}

/// Sends SIGTERM to every process of group `group`.
pub fn signal_group_terminate(group: u32) {
    signal_group(group, Signal::Terminate);
}

/// Starts `command` (prepared by [`prepare`]) and remembers its child as one this
/// process started, so that [`reap_adopted`] never reaps it.
///
/// # Errors
///
/// Why it could not be started.
pub fn spawn_tokio(
    command: &mut tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    let mut started = started_lock();
    let child = command.spawn()?;
    if let Some(pid) = child.id() {
        remember(&mut started, pid);
    }
    Ok(child)
}

/// [`spawn_tokio`] for a std command.
///
/// # Errors
///
/// Why it could not be started.
pub fn spawn_std(command: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    let mut started = started_lock();
    let child = command.spawn()?;
    remember(&mut started, child.id());
    Ok(child)
}

/// The PIDs of the children this process started (not adopted), most recent last,
/// at most [`MAX_STARTED`]; and the lock held while one starts, so that a child
/// that exits at once is never taken for an adopted orphan.
static STARTED: std::sync::Mutex<std::collections::VecDeque<u32>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// Children remembered: far more than ever run at once.
const MAX_STARTED: usize = 4096;

fn started_lock() -> std::sync::MutexGuard<'static, std::collections::VecDeque<u32>> {
    STARTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn remember(started: &mut std::collections::VecDeque<u32>, pid: u32) {
    if started.len() >= MAX_STARTED {
        started.pop_front();
    }
    started.push_back(pid);
}

/// Reaps the adopted orphans that exited (zombie children this process did not
/// start: a subreaper inherits them, and nothing else waits for them). Never
/// reaps a child this process started: tokio and std wait for those. For the
/// binary, every few seconds. Returns how many it reaped.
pub fn reap_adopted() -> usize {
    #[cfg(target_os = "linux")]
    {
        let mut started = started_lock();
        let children = linux::children_with_state();
        // Forget started children that are gone (their PIDs may come back).
        started.retain(|pid| children.iter().any(|(child, _)| *child as u32 == *pid));
        let mut reaped = 0;
        for (pid, zombie) in children {
            if zombie && !started.contains(&(pid as u32)) && linux::reap_one(pid) {
                reaped += 1;
            }
        }
        reaped
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// A signal this module sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Terminate,
    Kill,
}

/// Sends `signal` to every process of group `group`; `false` when the group has no
/// process left (or is not a group this process may signal).
fn signal_group(group: u32, signal: Signal) -> bool {
    #[cfg(unix)]
    {
        let Ok(group) = libc::pid_t::try_from(group) else {
            return false;
        };
        if group <= 1 {
            return false;
        }
        let signal = match signal {
            Signal::Terminate => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        };
        linux::kill(-group, signal)
    }
    #[cfg(not(unix))]
    {
        let _ = (group, signal);
        false
    }
}

/// Whether group `group` still has a process (a zombie not yet reaped counts).
#[cfg(test)]
fn group_alive(group: u32) -> bool {
    #[cfg(unix)]
    {
        libc::pid_t::try_from(group).is_ok_and(|group| group > 1 && linux::kill(-group, 0))
    }
    #[cfg(not(unix))]
    {
        let _ = group;
        false
    }
}

/// Makes this process a child subreaper (Linux): orphaned descendants become its
/// children, for [`end_orphans`]. Only for a process that owns all its children
/// (the `codemode-host` binary), never for a library user's.
///
/// # Errors
///
/// The `prctl` failed (logged by the caller; children then only die with their
/// group and their parent).
pub fn become_subreaper() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        linux::subreaper()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(())
    }
}

/// Ends every child this process still has (orphans it adopted as a subreaper
/// included): SIGTERM, SIGKILL to whoever is left after `grace`, and reaps them.
/// For the very end of the binary, after the upstreams were stopped: it would end
/// any child, whoever started it. Returns how many it ended.
pub fn end_orphans(grace: Duration) -> usize {
    #[cfg(target_os = "linux")]
    {
        let orphans = linux::children();
        if orphans.is_empty() {
            return 0;
        }
        for &pid in &orphans {
            linux::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        loop {
            linux::reap();
            let left: Vec<libc::pid_t> = linux::children();
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                for &pid in &left {
                    linux::kill(pid, libc::SIGKILL);
                }
                let killed = Instant::now() + Duration::from_secs(1);
                while !linux::children().is_empty() && Instant::now() < killed {
                    linux::reap();
                    std::thread::sleep(POLL);
                }
                break;
            }
            std::thread::sleep(POLL);
        }
        orphans.len()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = grace;
        0
    }
}

#[cfg(unix)]
#[allow(unsafe_code)]
mod linux {
    //! The system calls, each behind a safe function.

    /// `kill(pid, signal)`; `true` when it was delivered (or, with signal 0, the
    /// target exists).
    pub(super) fn kill(pid: libc::pid_t, signal: libc::c_int) -> bool {
        // SAFETY: kill takes plain integers and touches no memory of ours.
        unsafe { libc::kill(pid, signal) == 0 }
    }

    /// Sets the death signal of the child `command` starts to SIGKILL, and ends
    /// the child at once if its parent already died between the fork and the
    /// `prctl` (the signal would then never come).
    #[cfg(target_os = "linux")]
    pub(super) fn die_with_parent(command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: getpid is async-signal-safe; it runs here, in the parent.
        let parent = unsafe { libc::getpid() };
        let set = move || {
            // SAFETY: prctl with PR_SET_PDEATHSIG and getppid are async-signal-safe
            // system calls on plain integers, allowed between fork and exec.
            let ok = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } == 0;
            if !ok {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: as above.
            if unsafe { libc::getppid() } != parent {
                // The server exited while starting it. (No message: allocating is
                // not allowed here.)
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        };
        // SAFETY: the closure only makes async-signal-safe system calls and
        // allocates nothing on its success path.
        unsafe {
            command.pre_exec(set);
        }
    }

    /// `PR_SET_CHILD_SUBREAPER` for this process.
    #[cfg(target_os = "linux")]
    pub(super) fn subreaper() -> std::io::Result<()> {
        // SAFETY: prctl on plain integers.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Reaps every child of this process that has exited.
    #[cfg(target_os = "linux")]
    pub(super) fn reap() {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into the local it is given.
            let pid = unsafe { libc::waitpid(-1, &raw mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
        }
    }

    /// Reaps child `pid` if it has exited; whether it did.
    #[cfg(target_os = "linux")]
    pub(super) fn reap_one(pid: libc::pid_t) -> bool {
        let mut status = 0;
        // SAFETY: waitpid writes the status into the local it is given.
        unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) == pid }
    }

    /// This process's children not yet reaped, each with whether it is a zombie.
    #[cfg(target_os = "linux")]
    pub(super) fn children_with_state() -> Vec<(libc::pid_t, bool)> {
        let me = std::process::id().to_string();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut children = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<libc::pid_t>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
            let mut rest = stat
                .rsplit_once(") ")
                .map_or("", |(_, rest)| rest)
                .split(' ');
            let (Some(state), Some(ppid)) = (rest.next(), rest.next()) else {
                continue;
            };
            if ppid == me {
                children.push((pid, state == "Z" || state == "X"));
            }
        }
        children
    }

    /// The PIDs of this process's children that have not exited.
    #[cfg(target_os = "linux")]
    pub(super) fn children() -> Vec<libc::pid_t> {
        children_with_state()
            .into_iter()
            .filter_map(|(pid, zombie)| (!zombie).then_some(pid))
            .collect()
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_group_ignoring_sigterm_is_killed_after_the_grace() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            // A shell leading its group, with a child, both ignoring SIGTERM; it
            // says when its traps are set.
            let mut command = tokio::process::Command::new("sh");
            command
                .args(["-c", "trap '' TERM; sleep 60 & echo ready; wait"])
                .stdout(std::process::Stdio::piped());
            prepare(command.as_std_mut());
            let mut child = spawn_tokio(&mut command).expect("start sh");
            let group = child.id().expect("a pid");
            let stdout = child.stdout.take().expect("stdout");
            let mut ready = String::new();
            tokio::io::AsyncBufReadExt::read_line(
                &mut tokio::io::BufReader::new(stdout),
                &mut ready,
            )
            .await
            .expect("read");
            assert_eq!(ready, "ready\n");
            assert!(group_alive(group));
            signal_group_terminate(group);
            let ignored = tokio::time::timeout(Duration::from_millis(200), child.wait()).await;
            assert!(ignored.is_err(), "the shell ignores SIGTERM");
            kill_group(group);
            let status = child.wait().await.expect("wait");
            assert!(!status.success());
            // The group's last member (the sleep, reparented to init and reaped
            // there) is gone too.
            let deadline = Instant::now() + Duration::from_secs(20);
            while group_alive(group) {
                assert!(Instant::now() < deadline, "the group outlived SIGKILL");
                tokio::time::sleep(POLL).await;
            }
        });
        assert!(!signal_group(1, Signal::Terminate), "never init's group");
    }
}

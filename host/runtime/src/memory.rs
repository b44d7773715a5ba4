//! The linear memory of every sandbox of this process together: one budget,
//! `--max-total-memory`.
//!
//! `--max-memory` caps each interpreter and plugin instance, so without a total a
//! server's memory grew with `--max-concurrent-executions` times the instances each
//! execution used (64 executions of the Python and JavaScript examples peaked at
//! 7 GB) until the kernel killed the whole server. Every store reserves here what
//! its memories grow by (their initial size included, as wasmtime reports creating
//! a memory as growing it from zero) and gives it back when it is dropped; a grow
//! the total has no room for fails, and its execution ends with `resource limit
//! exceeded` naming `--max-total-memory`. Only what sandboxes may address counts:
//! the instance pool's slots also keep up to 16 MiB of their last instance's pages
//! (sandbox.rs), and the host's own heap is apart.
//!
//! The total is the process's, not a service's: memory is. A second service in
//! one process (a library user's) sets the same total again.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The one total of this process.
pub static TOTAL: Total = Total::new();

/// Bytes reserved by live sandboxes, and the most there may be.
#[derive(Debug)]
pub struct Total {
    max: AtomicUsize,
    used: AtomicUsize,
}

impl Total {
    /// No bytes reserved, no limit until [`Total::set_max`].
    const fn new() -> Self {
        Self {
            max: AtomicUsize::new(usize::MAX),
            used: AtomicUsize::new(0),
        }
    }

    /// Makes `max` the most all sandboxes may reserve together; reservations made
    /// before stand.
    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// Reserves `bytes`, unless that would take the total past its maximum.
    pub fn reserve(&self, bytes: usize) -> bool {
        let max = self.max.load(Ordering::Relaxed);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= max)
            })
            .is_ok()
    }

    /// Gives back `bytes` reserved before.
    pub fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes reserved now (the `codemode_sandbox_memory_bytes` gauge).
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// The default `--max-total-memory`: half of the memory this process may use (the
/// machine's, or its cgroup's `memory.max` where that is lower), so a burst of
/// executions fails some of them before the kernel ends the server; at least
/// 1 GiB.
pub fn default_total() -> usize {
    static DEFAULT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *DEFAULT.get_or_init(|| {
        let machine = physical_memory();
        let available = match cgroup_memory_max() {
            Some(cgroup) => machine.min(cgroup),
            None => machine,
        };
        (available / 2).max(1 << 30)
    })
}

/// The machine's physical memory in bytes (4 GiB if the system does not say).
#[allow(unsafe_code)]
fn physical_memory() -> usize {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (usize::try_from(pages), usize::try_from(page)) {
        (Ok(pages), Ok(page)) if pages > 0 && page > 0 => pages.saturating_mul(page),
        _ => 4 << 30,
    }
}

/// The `memory.max` of this process's cgroup (v2), if it sets one.
fn cgroup_memory_max() -> Option<usize> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))?;
    let file = std::path::Path::new("/sys/fs/cgroup")
        .join(path.trim_start_matches('/'))
        .join("memory.max");
    parse_memory_max(&std::fs::read_to_string(file).ok()?)
}

/// A cgroup's `memory.max`: bytes, or `max` for none.
fn parse_memory_max(text: &str) -> Option<usize> {
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_maximum_and_come_back() {
        let total = Total::new();
        total.set_max(100);
        assert!(total.reserve(60));
        assert!(!total.reserve(41), "past the maximum");
        assert!(total.reserve(40), "exactly the maximum");
        assert_eq!(total.used(), 100);
        total.release(60);
        assert_eq!(total.used(), 40);
        assert!(total.reserve(60));
        assert!(!total.reserve(usize::MAX), "no overflow");
    }

    #[test]
    fn a_cgroup_without_a_limit_says_max() {
        assert_eq!(parse_memory_max("max\n"), None);
        assert_eq!(parse_memory_max("2147483648\n"), Some(2 << 30));
    }

    #[test]
    fn the_default_is_half_of_what_the_process_may_use_and_at_least_a_gibibyte() {
        let default = default_total();
        assert!(default >= 1 << 30);
        assert!(default <= (physical_memory() / 2).max(1 << 30));
    }
}

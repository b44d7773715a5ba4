//! The start-up self-check of how pooled slots are reset between instances.
//!
//! Thousands of executions of different subjects reuse the same pooled memory and
//! table slots, so a reset that misses one written page hands one execution's data
//! to the next. With `PAGEMAP_SCAN` (Linux 6.7+) wasmtime resets only the pages the
//! kernel reports as *written* (`PAGE_IS_WRITTEN`) and leaves every other page
//! mapped as it is. That fails open on a kernel that reports fewer pages than were
//! written (a series proposed for the mm tree limits the flag to userfaultfd
//! write-protected areas): nothing would be reset.
//!
//! So before the engine is built, [`probe`] writes pages in scratch mappings shaped
//! like a slot (anonymous memory, and a private copy-on-write mapping of a memfd as a
//! memory image is) and asks the kernel the question wasmtime's reset asks, the way
//! it asks it: the same flags, a buffer of 64 runs resumed from where the kernel
//! stopped, a budget of pages. [`verdict`] trusts the scan only when every written
//! page is reported or lies past where the scans stopped (wasmtime returns that
//! rest of the slot to the kernel); otherwise the engine turns the scan off, and
//! wasmtime resets a fixed prefix with memset and returns the rest of the slot to
//! the kernel, which does not depend on the flag.

use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

/// What the self-check concluded about `PAGEMAP_SCAN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every written page was reported: the scan may decide which pages to reset.
    Trusted,
    /// The ioctl is missing or failed: wasmtime cannot use the scan.
    Unavailable {
        /// Why, as the system said it.
        reason: String,
    },
    /// The scan answered but left written pages out: using it would leave them in
    /// place for the next instance.
    Misreports {
        /// Pages the check wrote.
        written: usize,
        /// How many of those the scan did not report.
        missed: usize,
    },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Trusted => write!(f, "PAGEMAP_SCAN reports every written page"),
            Verdict::Unavailable { reason } => {
                write!(f, "PAGEMAP_SCAN is unavailable ({reason})")
            }
            Verdict::Misreports { written, missed } => write!(
                f,
                "PAGEMAP_SCAN left {missed} of {written} written pages unreported"
            ),
        }
    }
}

/// What the kernel answered for one scratch mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The indexes of the pages the check wrote.
    pub written: Vec<usize>,
    /// What the scans reported, or why they failed.
    pub reported: Result<Scanned, String>,
}

/// What the scans of one mapping reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    /// The page ranges reported as written.
    pub ranges: Vec<Range<usize>>,
    /// The page where the last scan stopped: wasmtime returns every page from here
    /// on to the kernel instead of asking about it (the mapping's page count when
    /// the scans reached its end).
    pub rest_from: usize,
}

/// Decides from the kernel's answers whether the scan can be trusted: every written
/// page of every mapping must lie in a reported range, or past where the scans
/// stopped (which wasmtime returns to the kernel). Reporting more than was written
/// only costs time (a page copied back needlessly), never isolation.
pub fn verdict(answers: &[Answer]) -> Verdict {
    let mut written = 0;
    let mut missed = 0;
    for answer in answers {
        let reported = match &answer.reported {
            Ok(reported) => reported,
            Err(reason) => {
                return Verdict::Unavailable {
                    reason: reason.clone(),
                };
            }
        };
        written += answer.written.len();
        missed += answer
            .written
            .iter()
            .filter(|&&page| {
                page < reported.rest_from
                    && !reported.ranges.iter().any(|range| range.contains(&page))
            })
            .count();
    }
    match missed {
        0 => Verdict::Trusted,
        missed => Verdict::Misreports { written, missed },
    }
}

/// The self-check's verdict for this process, worked out once: the engine is built
/// once per start, but the check must not run again for each `check` or reload.
/// Logs one WARN when the scan is not trusted.
pub fn checked() -> &'static Verdict {
    static VERDICT: OnceLock<Verdict> = OnceLock::new();
    VERDICT.get_or_init(|| {
        let verdict = verdict(&probe());
        match &verdict {
            Verdict::Trusted => tracing::debug!("slot reset self-check: {verdict}"),
            Verdict::Unavailable { .. } | Verdict::Misreports { .. } => tracing::warn!(
                "slot reset self-check: {verdict}; pooled slots are reset without it (a fixed prefix copied back, the rest returned to the kernel): isolation holds, fresh instances take more page faults"
            ),
        }
        verdict
    })
}

/// Runs the scan over scratch mappings shaped like pooled slots, after writing
/// scattered pages of each.
#[cfg(target_os = "linux")]
pub fn probe() -> Vec<Answer> {
    match linux::Scratch::pagemap() {
        Ok(pagemap) => vec![
            linux::probe_anonymous(&pagemap),
            linux::probe_image_copy(&pagemap),
        ],
        Err(reason) => vec![Answer {
            written: Vec::new(),
            reported: Err(reason),
        }],
    }
}

/// Off Linux there is no `PAGEMAP_SCAN`, and wasmtime does not use it.
#[cfg(not(target_os = "linux"))]
pub fn probe() -> Vec<Answer> {
    vec![Answer {
        written: Vec::new(),
        reported: Err("not Linux".to_owned()),
    }]
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod linux {
    //! The ioctl, as `linux/fs.h` declares it (libc does not), and the scratch
    //! mappings.

    use std::fs::File;
    use std::os::fd::AsRawFd;

    use super::Answer;

    /// `PAGE_IS_WRITTEN`: written since write-protected (for memory that never was,
    /// every present page today).
    const PAGE_IS_WRITTEN: u64 = 1 << 1;
    /// `PAGE_IS_FILE`: backed by a file.
    const PAGE_IS_FILE: u64 = 1 << 2;
    /// `PAGE_IS_PRESENT`: in memory.
    const PAGE_IS_PRESENT: u64 = 1 << 3;
    /// `PAGE_IS_SWAPPED`: in swap.
    const PAGE_IS_SWAPPED: u64 = 1 << 4;
    /// `PAGE_IS_PFNZERO`: the shared zero page.
    const PAGE_IS_PFNZERO: u64 = 1 << 5;

    /// `struct pm_scan_arg`.
    #[repr(C)]
    #[derive(Default)]
    struct PmScanArg {
        size: u64,
        flags: u64,
        start: u64,
        end: u64,
        walk_end: u64,
        vec: u64,
        vec_len: u64,
        max_pages: u64,
        category_inverted: u64,
        category_mask: u64,
        category_anyof_mask: u64,
        return_mask: u64,
    }

    /// `struct page_region`.
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct PageRegion {
        start: u64,
        end: u64,
        categories: u64,
    }

    /// `PAGEMAP_SCAN`: `_IOWR('f', 16, struct pm_scan_arg)`, 0xC0606610.
    const PAGEMAP_SCAN: u32 =
        (3 << 30) | ((std::mem::size_of::<PmScanArg>() as u32) << 16) | ((b'f' as u32) << 8) | 16;

    /// Pages in each scratch mapping.
    const PAGES: usize = 1024;
    /// Every how many pages the check writes one: 147 scattered runs, as CPython's
    /// heap writes them, more than one scan's buffer holds.
    const STRIDE: usize = 7;
    /// Regions one scan may report: wasmtime's buffer, so the check resumes where
    /// the kernel stopped, as wasmtime's reset does.
    const MAX_REGIONS: usize = 64;
    /// Pages all scans of one mapping may report, as wasmtime's keep-resident
    /// budget: fewer than are written, so the kernel also stops at a budget, and
    /// the pages after that count as returned to the kernel.
    const BUDGET_PAGES: usize = 120;

    /// A mapping unmapped on drop.
    pub(super) struct Scratch {
        ptr: *mut u8,
        len: usize,
        page: usize,
    }

    impl Scratch {
        /// `/proc/self/pagemap`, the file the ioctl is asked on.
        pub(super) fn pagemap() -> Result<File, String> {
            File::open("/proc/self/pagemap").map_err(|error| format!("/proc/self/pagemap: {error}"))
        }

        /// Maps `PAGES` pages: anonymous memory, or a private copy-on-write view of
        /// `fd` (as wasmtime maps a module's memory image).
        fn map(fd: Option<i32>) -> Result<Scratch, String> {
            // SAFETY: `sysconf` only reads a system constant.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .map_err(|_| "no page size".to_owned())?;
            let len = PAGES * page;
            let (flags, fd) = match fd {
                Some(fd) => (libc::MAP_PRIVATE, fd),
                None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
            };
            // SAFETY: a fresh mapping at an address the kernel chooses; nothing
            // else refers to that range.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags,
                    fd,
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(format!("mmap: {}", std::io::Error::last_os_error()));
            }
            Ok(Scratch {
                ptr: ptr.cast(),
                len,
                page,
            })
        }

        /// Reads every page (a read maps the zero page or the file's page, which
        /// the scan must tell apart from a written one), then writes every
        /// `STRIDE`th; returns the written pages' indexes.
        fn touch(&self) -> Vec<usize> {
            let mut written = Vec::new();
            for index in 0..PAGES {
                // SAFETY: `index * page` is inside the mapping, which is readable
                // and writable.
                unsafe {
                    let at = self.ptr.add(index * self.page);
                    std::ptr::read_volatile(at);
                    if index % STRIDE == 0 {
                        std::ptr::write_volatile(at, 0xA5);
                        written.push(index);
                    }
                }
            }
            written
        }

        /// Asks the kernel which pages are dirty as wasmtime's reset does: with
        /// its flags (written, present or swapped, neither the zero page nor a
        /// file's), into a buffer of `MAX_REGIONS` runs, resuming where the kernel
        /// stopped while the buffer was full and the page budget lasts.
        fn scan(&self, pagemap: &File) -> Result<super::Scanned, String> {
            let start = self.ptr as u64;
            let end = start + self.len as u64;
            let page = self.page as u64;
            let index = |address: u64| {
                usize::try_from(address.saturating_sub(start).div_ceil(page)).unwrap_or(usize::MAX)
            };
            let mut ranges = Vec::new();
            let mut cursor = start;
            let mut budget = BUDGET_PAGES as u64;
            while budget > 0 {
                let mut regions = [PageRegion::default(); MAX_REGIONS];
                let mut arg = PmScanArg {
                    size: std::mem::size_of::<PmScanArg>() as u64,
                    start: cursor,
                    end,
                    vec: regions.as_mut_ptr() as u64,
                    vec_len: MAX_REGIONS as u64,
                    max_pages: budget,
                    category_inverted: PAGE_IS_PFNZERO | PAGE_IS_FILE,
                    category_mask: PAGE_IS_WRITTEN | PAGE_IS_PFNZERO | PAGE_IS_FILE,
                    category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                    ..PmScanArg::default()
                };
                // SAFETY: `arg` describes `regions`, a writable array of `vec_len`
                // entries that outlives the call, and a range this process maps.
                let found = unsafe {
                    libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as libc::Ioctl, &mut arg)
                };
                let found = usize::try_from(found)
                    .map_err(|_| format!("ioctl: {}", std::io::Error::last_os_error()))?;
                for region in regions.iter().take(found) {
                    let first = region.start.saturating_sub(start) / page;
                    ranges.push(usize::try_from(first).unwrap_or(usize::MAX)..index(region.end));
                    budget = budget.saturating_sub(region.end.saturating_sub(region.start) / page);
                }
                // The kernel stops at the end, at the budget, or with the buffer
                // full; only the last is resumed (wasmtime returns the rest of the
                // slot to the kernel in the other cases).
                cursor = arg.walk_end.clamp(cursor, end);
                if cursor >= end || found < MAX_REGIONS {
                    break;
                }
            }
            Ok(super::Scanned {
                ranges,
                rest_from: index(cursor),
            })
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            // SAFETY: the mapping `map` made, unmapped once.
            unsafe {
                libc::munmap(self.ptr.cast(), self.len);
            }
        }
    }

    /// Writes the pages of `scratch` and scans it; a mapping that could not be
    /// made is the answer's error. Errors name the mapping (`what`).
    fn sweep(what: &str, scratch: Result<Scratch, String>, pagemap: &File) -> Answer {
        match scratch {
            Ok(scratch) => {
                let written = scratch.touch();
                Answer {
                    reported: scratch
                        .scan(pagemap)
                        .map_err(|reason| format!("{what}: {reason}")),
                    written,
                }
            }
            Err(reason) => Answer {
                written: Vec::new(),
                reported: Err(format!("{what}: {reason}")),
            },
        }
    }

    /// Anonymous memory, as a slot's memory beyond its image.
    pub(super) fn probe_anonymous(pagemap: &File) -> Answer {
        sweep("anonymous scratch memory", Scratch::map(None), pagemap)
    }

    /// A private copy-on-write view of a memfd, as a slot's memory image: a
    /// written page becomes the instance's own copy and must be reported.
    pub(super) fn probe_image_copy(pagemap: &File) -> Answer {
        let image = || -> Result<Scratch, String> {
            // SAFETY: the name is a NUL-terminated string.
            let fd =
                unsafe { libc::memfd_create(c"codemode-reset-check".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
            }
            // SAFETY: `fd` was just created and is owned here only.
            let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            // SAFETY: `sysconf` only reads a system constant.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let len = u64::try_from(page).unwrap_or(4096) * PAGES as u64;
            file.set_len(len)
                .map_err(|error| format!("memfd: {error}"))?;
            // The mapping keeps the file's pages; the descriptor can close.
            Scratch::map(Some(file.as_raw_fd()))
        };
        sweep("a copy-on-write view of a memfd", image(), pagemap)
    }
}

#[cfg(test)]
// A scan's answer of one range is a list of one range, not a range collected.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    /// Pages in the mappings of these answers.
    const PAGES: usize = 1024;

    /// An answer whose scans reached the end of the mapping.
    fn answer(written: &[usize], reported: &[Range<usize>]) -> Answer {
        stopped_at(written, reported, PAGES)
    }

    /// An answer whose last scan stopped at page `rest_from`.
    fn stopped_at(written: &[usize], reported: &[Range<usize>], rest_from: usize) -> Answer {
        Answer {
            written: written.to_vec(),
            reported: Ok(Scanned {
                ranges: reported.to_vec(),
                rest_from,
            }),
        }
    }

    #[test]
    fn every_written_page_reported_is_trusted() {
        let answers = [
            answer(&[0, 7, 14], &[0..1, 7..8, 14..15]),
            // A huge page reported whole covers more than was written.
            answer(&[3, 9], &[0..512]),
        ];
        assert_eq!(verdict(&answers), Verdict::Trusted);
    }

    #[test]
    fn pages_past_where_the_scan_stopped_are_returned_to_the_kernel_so_covered() {
        // The budget ran out at page 10: wasmtime decommits pages 10 and up.
        assert_eq!(
            verdict(&[stopped_at(&[0, 7, 14, 21], &[0..1, 7..8], 10)]),
            Verdict::Trusted
        );
        // ... but a page before that which the scan skipped stays as it was.
        assert_eq!(
            verdict(&[stopped_at(&[0, 7, 14, 21], &[0..1], 10)]),
            Verdict::Misreports {
                written: 4,
                missed: 1
            }
        );
    }

    #[test]
    fn a_written_page_left_out_is_not_trusted() {
        let answers = [
            answer(&[0, 7, 14], &[0..1, 7..8, 14..15]),
            answer(&[0, 7, 14], &[0..1]),
        ];
        let verdict = verdict(&answers);
        assert_eq!(
            verdict,
            Verdict::Misreports {
                written: 6,
                missed: 2
            }
        );
        assert_eq!(
            verdict.to_string(),
            "PAGEMAP_SCAN left 2 of 6 written pages unreported"
        );
    }

    #[test]
    fn a_scan_that_reports_nothing_is_not_trusted() {
        // The kernel that limits PAGE_IS_WRITTEN to userfaultfd write-protected
        // areas answers with no regions at all.
        assert_eq!(
            verdict(&[answer(&[0, 7], &[])]),
            Verdict::Misreports {
                written: 2,
                missed: 2
            }
        );
    }

    #[test]
    fn a_missing_ioctl_is_unavailable() {
        let answers = [Answer {
            written: vec![0],
            reported: Err("ioctl: Inappropriate ioctl for device (os error 25)".to_owned()),
        }];
        let verdict = verdict(&answers);
        assert_eq!(
            verdict.to_string(),
            "PAGEMAP_SCAN is unavailable (ioctl: Inappropriate ioctl for device (os error 25))"
        );
    }

    #[test]
    fn this_host_s_kernel_reports_every_written_page() {
        if !wasmtime::PoolingAllocationConfig::is_pagemap_scan_available() {
            // Before Linux 6.7 there is no scan to check (CI's kernel has it).
            eprintln!("PAGEMAP_SCAN unavailable: nothing to check");
            return;
        }
        // The check must trust this kernel (6.18 here), and see its budget stop
        // the scans before the end of each mapping.
        let answers = probe();
        assert_eq!(answers.len(), 2, "{answers:?}");
        for answer in &answers {
            assert_eq!(answer.written.len(), 147, "{answer:?}");
        }
        assert_eq!(verdict(&answers), Verdict::Trusted, "{answers:?}");
        for answer in &answers {
            let scanned = answer.reported.as_ref().expect("scanned");
            // 120 pages of budget, 7 apart: the scans stop at page 833 or so.
            assert!(
                scanned.ranges.len() > 64,
                "one buffer of runs, then resumed: {scanned:?}"
            );
            assert!(scanned.rest_from < 1024, "{scanned:?}");
        }
    }
}

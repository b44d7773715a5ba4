//! The phase table `cargo xtask test` prints at its end: each phase's wall time
//! and the total, also when a phase failed, so that everyone measures the test
//! command the same way (issue 48).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Result;

/// How a phase ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed,
}

/// The phases run so far, in order, with their wall times.
pub(crate) struct Phases {
    started: Instant,
    /// Time spent before this process started (cargo building xtask), when known.
    before: Option<Duration>,
    rows: Vec<(String, Duration, Outcome)>,
}

impl Phases {
    /// Starts the clock; `before` is time spent before xtask ran (its build).
    pub(crate) fn new(before: Option<Duration>) -> Self {
        Self {
            started: Instant::now(),
            before,
            rows: Vec::new(),
        }
    }

    /// Runs one phase, recording its wall time whether it passes or fails.
    pub(crate) fn run<T>(&mut self, name: &str, phase: impl FnOnce() -> Result<T>) -> Result<T> {
        eprintln!("xtask: phase {name}");
        let start = Instant::now();
        let result = phase();
        let outcome = match result {
            Ok(_) => Outcome::Passed,
            Err(_) => Outcome::Failed,
        };
        self.rows.push((name.to_owned(), start.elapsed(), outcome));
        result
    }

    /// The table: one row per phase, then the total (the xtask build included
    /// when it is known).
    pub(crate) fn table(&self) -> String {
        let mut out = format!("{:<20} {:>10}\n", "phase", "wall time");
        if let Some(before) = self.before {
            let _ = writeln!(out, "{:<20} {:>10}", "xtask build", minutes(before));
        }
        for (name, took, outcome) in &self.rows {
            let mark = match outcome {
                Outcome::Passed => "",
                Outcome::Failed => "  FAILED",
            };
            let _ = writeln!(out, "{name:<20} {:>10}{mark}", minutes(*took));
        }
        let total = self.started.elapsed() + self.before.unwrap_or_default();
        let _ = writeln!(out, "{:<20} {:>10}", "total", minutes(total));
        out
    }
}

/// `m:ss.s`, the way the table shows a duration.
fn minutes(took: Duration) -> String {
    let tenths = took.as_millis() / 100;
    format!("{}:{:02}.{}", tenths / 600, (tenths / 10) % 60, tenths % 10)
}

/// How long this process ran before `main`: `cargo run` (the `cargo xtask`
/// alias) builds xtask, then replaces itself with it, so the process started
/// when cargo did. Read from `/proc` (Linux); `None` elsewhere.
pub(crate) fn time_before_start() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Field 22 (starttime, in clock ticks since boot), counted after the
    // command's closing parenthesis, which may itself hold spaces.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let seconds: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    // USER_HZ is 100 on every Linux architecture that matters here.
    let started = Duration::from_millis(ticks * 10);
    Duration::try_from_secs_f64(seconds)
        .ok()?
        .checked_sub(started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_each_phase_and_marks_the_failed_one() {
        let mut phases = Phases::new(Some(Duration::from_secs(75)));
        assert!(phases.run("fmt", || Ok(())).is_ok());
        assert!(
            phases
                .run("lints", || -> Result<()> { anyhow::bail!("no") })
                .is_err()
        );
        let table = phases.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "phase                 wall time");
        assert_eq!(lines[1], "xtask build              1:15.0");
        assert!(lines[2].starts_with("fmt "), "{table}");
        assert!(!lines[2].contains("FAILED"), "{table}");
        assert!(lines[3].starts_with("lints ") && lines[3].ends_with("  FAILED"));
        assert!(lines[4].starts_with("total "), "{table}");
    }

    #[test]
    fn durations_read_as_minutes_seconds_and_tenths() {
        assert_eq!(minutes(Duration::from_millis(0)), "0:00.0");
        assert_eq!(minutes(Duration::from_millis(61_250)), "1:01.2");
        assert_eq!(minutes(Duration::from_secs(3_600)), "60:00.0");
    }
}

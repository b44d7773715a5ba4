//! The phase table `cargo xtask test` prints at its end: each phase's wall time
//! and the total, also when a phase failed, so that everyone measures the test
//! command the same way (issue 48).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use std::io::Read as _;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

use anyhow::{Context, Result, bail};

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

    /// Starts phase `name` as `command`, a child process that runs beside the
    /// phases that follow (on the cores they leave idle: a build's single-crate
    /// stretches, linking); its output is kept until [`Phases::join`].
    pub(crate) fn beside(&mut self, name: &str, command: &mut Command) -> Result<Beside> {
        eprintln!("xtask: phase {name} (beside the phases that follow)");
        let shown = format!("{command:?}");
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {shown}"))?;
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut text);
                }
                text
            })
        };
        let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
        Ok(Beside {
            name: format!("{name} (beside)"),
            shown,
            child: Some(child),
            output: vec![stdout, stderr],
            start: Instant::now(),
        })
    }

    /// Waits for `beside`, shows its output, and records its own wall time
    /// (from its start, so the rows add up to more than the total).
    pub(crate) fn join(&mut self, mut beside: Beside) -> Result<()> {
        eprintln!("xtask: waiting for {}", beside.name);
        let status = match beside.child.take() {
            Some(mut child) => child.wait().context("cannot wait for a phase")?,
            None => bail!("{} was waited for already", beside.name),
        };
        let took = beside.start.elapsed();
        for drain in beside.output.drain(..) {
            let text = drain.join().unwrap_or_default();
            eprint!("{}", String::from_utf8_lossy(&text));
        }
        let outcome = match status.success() {
            true => Outcome::Passed,
            false => Outcome::Failed,
        };
        self.rows.push((beside.name.clone(), took, outcome));
        match outcome {
            Outcome::Passed => Ok(()),
            Outcome::Failed => bail!("{} failed with {status}", beside.shown),
        }
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

/// A phase running beside others ([`Phases::beside`]); dropped unjoined (a
/// phase after it failed), its process is ended.
pub(crate) struct Beside {
    name: String,
    shown: String,
    child: Option<Child>,
    output: Vec<JoinHandle<Vec<u8>>>,
    start: Instant,
}

impl Drop for Beside {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
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
    fn a_phase_beside_the_others_is_recorded_when_joined_and_fails_with_its_process() {
        let mut phases = Phases::new(None);
        let ok = phases
            .beside("quiet", Command::new("sh").args(["-c", "echo kept"]))
            .expect("sh starts");
        let failing = phases
            .beside("loud", Command::new("sh").args(["-c", "exit 3"]))
            .expect("sh starts");
        assert!(phases.run("between", || Ok(())).is_ok());
        assert!(phases.join(ok).is_ok());
        let error = phases.join(failing).expect_err("exit 3 fails");
        assert!(error.to_string().contains("exit status: 3"), "{error}");
        let table = phases.table();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("between "), "{table}");
        assert!(lines[2].starts_with("quiet (beside) "), "{table}");
        assert!(!lines[2].contains("FAILED"), "{table}");
        assert!(lines[3].starts_with("loud (beside) "), "{table}");
        assert!(lines[3].ends_with("  FAILED"), "{table}");
    }

    #[test]
    fn durations_read_as_minutes_seconds_and_tenths() {
        assert_eq!(minutes(Duration::from_millis(0)), "0:00.0");
        assert_eq!(minutes(Duration::from_millis(61_250)), "1:01.2");
        assert_eq!(minutes(Duration::from_secs(3_600)), "60:00.0");
    }
}

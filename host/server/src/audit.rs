//! The audit trail: one JSON line per native call, for operators.
//!
//! A line says who called what, what the policy decided, how the call ended (the
//! fixed outcome text, never its detail), what it cost and how long it took. It
//! never holds argument values or results: those belong to the caller, and the
//! audit log is read by other people.
//!
//! Lines are handed to a writer thread over a channel, so a native call pays for
//! formatting one line, not for a write to a file or a terminal; the thread flushes
//! whenever the channel runs empty. An execution waits for its lines to be written
//! ([`AuditLog::sync`]) before its answer leaves: a call the client saw succeed is
//! on record even if the process ends right after.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// How long an answer waits for its audit lines to be written (a log on a full
/// pipe or a stuck disk must not hold every answer for ever).
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(2);

use serde::Serialize;

/// What the policy said about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Denied (`permission denied`).
    Deny,
    /// The policy could not decide (`authorization policy failure`).
    Failure,
    /// The policy said to ask a human (`approval` says how that ended).
    Asked,
    /// The call was made in an earlier run of the program (which stopped to
    /// ask a human): its recorded result was given again, nothing ran.
    Replayed,
    /// The call ended before authorization (unknown name, binding, a budget).
    NotEvaluated,
}

/// One native call, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord<'a> {
    /// When the call ended, RFC 3339 in UTC with microseconds.
    pub time: String,
    /// The execution it belongs to: a number counting up from 1 per process.
    pub execution: u64,
    /// Who called.
    pub subject: &'a str,
    /// The capability's stable ID (empty when the name was not resolved).
    pub capability_id: &'a str,
    /// The capability's dotted name.
    pub capability: &'a str,
    /// What the policy said.
    pub decision: Decision,
    /// When the policy said to ask a human: how the asking ended, and for whom.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval<'a>>,
    /// `ok`, or the fixed text of the error (never its detail).
    pub outcome: &'a str,
    /// Fuel the plugin burned.
    pub fuel: u64,
    /// Wall time of the call, binding to conversion, in microseconds.
    pub duration_us: u64,
    /// Where the capability's plugin was pulled from (reference, digest, the key
    /// that verified it), when it came from a registry; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pulled: Option<&'a crate::source::Pulled>,
    /// The quota that refused the execution before it ran (the line of an
    /// execution, not a call: no capability, execution 0), or the quota on
    /// the capability's calls that refused this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<&'a str>,
}

/// How asking a human about one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Approval<'a> {
    /// `approved`, `approved for this execution`, `approved earlier` (an
    /// approval for the execution held), `declined`, `timed out`, `not asked`
    /// (the client cannot be asked) or `canceled` (the request was, meanwhile).
    pub outcome: &'static str,
    /// The subject whose client answered.
    pub subject: &'a str,
}

/// Where audit lines go.
#[derive(Debug)]
pub struct AuditLog {
    sender: Mutex<Option<Sender<String>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Lines handed to the writer so far.
    queued: AtomicU64,
    /// Lines the writer wrote (or failed to write) so far, and its signal.
    written: Arc<Written>,
}

/// How far the writer got, and the signal it gives after each flush.
#[derive(Debug, Default)]
struct Written {
    lines: Mutex<u64>,
    flushed: Condvar,
}

impl AuditLog {
    /// Audit lines to standard error.
    pub fn stderr() -> Self {
        Self::to_writer(Box::new(std::io::stderr()))
    }

    /// Audit lines to standard output (free when serving HTTP, where the operator
    /// log has stderr to itself).
    pub fn stdout() -> Self {
        Self::to_writer(Box::new(std::io::stdout()))
    }

    /// Audit lines appended to `path` (created if missing).
    ///
    /// # Errors
    ///
    /// When the file cannot be opened for appending.
    pub fn file(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self::to_writer(Box::new(file)))
    }

    /// Audit lines to `out`, written by a thread of their own.
    pub fn to_writer(out: Box<dyn Write + Send>) -> Self {
        let (sender, receiver) = std::sync::mpsc::channel();
        let written = Arc::new(Written::default());
        let progress = written.clone();
        let writer = std::thread::Builder::new()
            .name("codemode-audit".into())
            .spawn(move || write_lines(receiver, out, &progress));
        let writer = match writer {
            Ok(handle) => Some(handle),
            Err(error) => {
                tracing::error!(reason = %error, "cannot start the audit writer; audit lines are lost");
                None
            }
        };
        Self {
            sender: Mutex::new(Some(sender)),
            writer: Mutex::new(writer),
            queued: AtomicU64::new(0),
            written,
        }
    }

    /// Records one call.
    pub fn record(&self, record: &AuditRecord<'_>) {
        let Ok(mut line) = serde_json::to_string(record) else {
            return;
        };
        line.push('\n');
        if let Ok(sender) = self.sender.lock()
            && let Some(sender) = sender.as_ref()
            // The writer only stops when this log is closed.
            && sender.send(line).is_ok()
        {
            // Counted under the lock, in the order the writer receives them.
            self.queued.fetch_add(1, Ordering::Release);
        }
    }

    /// Waits until every line recorded before this call is written and flushed,
    /// at most `timeout` ([`SYNC_TIMEOUT`] for an answer); returns whether they
    /// were. At once when none is pending.
    pub fn sync(&self, timeout: Duration) -> bool {
        let wanted = self.queued.load(Ordering::Acquire);
        let Ok(mut lines) = self.written.lines.lock() else {
            return false;
        };
        let deadline = Instant::now() + timeout;
        while *lines < wanted {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            lines = match self.written.flushed.wait_timeout(lines, left) {
                Ok((lines, _)) => lines,
                Err(_) => return false,
            };
        }
        true
    }

    /// Writes every pending line and stops the writer; later records are dropped.
    pub fn close(&self) {
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
        if let Ok(mut writer) = self.writer.lock()
            && let Some(handle) = writer.take()
        {
            let _ = handle.join();
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.close();
    }
}

fn write_lines(receiver: Receiver<String>, out: Box<dyn Write + Send>, progress: &Written) {
    let mut out = std::io::BufWriter::new(out);
    while let Ok(line) = receiver.recv() {
        let mut written = out.write_all(line.as_bytes());
        let mut count = 1;
        // Drain what queued meanwhile, then flush once.
        while let Ok(line) = receiver.try_recv() {
            written = written.and_then(|()| out.write_all(line.as_bytes()));
            count += 1;
        }
        if let Err(error) = written.and_then(|()| out.flush()) {
            tracing::error!(reason = %error, "cannot write the audit log");
        }
        // Counted written even when the write failed: an answer waits for the
        // log to be done with its lines, not for a disk to come back.
        if let Ok(mut lines) = progress.lines.lock() {
            *lines += count;
        }
        progress.flushed.notify_all();
    }
}

/// `time` as RFC 3339 in UTC with microseconds, e.g. `2026-12-02T18:40:01.123456Z`.
pub fn rfc3339(time: SystemTime) -> String {
    // humantime formats years 1970 to 9999 only (and panics outside them): a clock
    // set that wrong is clamped, not a crash of the audit log.
    let latest = SystemTime::UNIX_EPOCH + Duration::from_micros(LATEST_MICROS);
    let time = time.clamp(SystemTime::UNIX_EPOCH, latest);
    humantime::format_rfc3339_micros(time).to_string()
}

/// 9999-12-31T23:59:59.999999Z, in microseconds since the epoch.
const LATEST_MICROS: u64 = 253_402_300_799_999_999;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Shared {
        /// What was written, as text.
        fn text(&self) -> anyhow::Result<String> {
            let bytes = self.0.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            Ok(String::from_utf8(bytes.clone())?)
        }
    }

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_record_is_one_json_line_with_fixed_fields() -> anyhow::Result<()> {
        let out = Shared::default();
        let log = AuditLog::to_writer(Box::new(out.clone()));
        let record = AuditRecord {
            time: "2026-12-02T18:40:01.000001Z".into(),
            execution: 7,
            subject: "analyst",
            capability_id: "c1",
            capability: "records.lookup",
            decision: Decision::Deny,
            approval: None,
            outcome: "permission denied",
            fuel: 0,
            duration_us: 12,
            pulled: None,
            quota: None,
        };
        log.record(&record);
        log.record(&AuditRecord {
            decision: Decision::NotEvaluated,
            ..record.clone()
        });
        log.record(&AuditRecord {
            decision: Decision::Asked,
            approval: Some(Approval {
                outcome: "declined",
                subject: "analyst",
            }),
            ..record.clone()
        });
        log.close();
        let text = out.text()?;
        assert_eq!(
            text,
            concat!(
                r#"{"time":"2026-12-02T18:40:01.000001Z","execution":7,"subject":"analyst","capability_id":"c1","capability":"records.lookup","decision":"deny","outcome":"permission denied","fuel":0,"duration_us":12}"#,
                "\n",
                r#"{"time":"2026-12-02T18:40:01.000001Z","execution":7,"subject":"analyst","capability_id":"c1","capability":"records.lookup","decision":"not_evaluated","outcome":"permission denied","fuel":0,"duration_us":12}"#,
                "\n",
                r#"{"time":"2026-12-02T18:40:01.000001Z","execution":7,"subject":"analyst","capability_id":"c1","capability":"records.lookup","decision":"asked","approval":{"outcome":"declined","subject":"analyst"},"outcome":"permission denied","fuel":0,"duration_us":12}"#,
                "\n"
            )
        );
        Ok(())
    }

    /// A sink that takes nothing until `open` is sent.
    struct Gated {
        open: std::sync::mpsc::Receiver<()>,
        opened: bool,
        out: Shared,
    }

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if !self.opened {
                let _ = self.open.recv();
                self.opened = true;
            }
            self.out.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn record(log: &AuditLog, execution: u64) {
        log.record(&AuditRecord {
            time: "2026-12-02T18:40:01.000001Z".into(),
            execution,
            subject: "analyst",
            capability_id: "c1",
            capability: "records.lookup",
            decision: Decision::Allow,
            approval: None,
            outcome: "ok",
            fuel: 0,
            duration_us: 1,
            pulled: None,
            quota: None,
        });
    }

    #[test]
    fn sync_returns_once_the_lines_recorded_before_it_are_written() -> anyhow::Result<()> {
        let (open, gate) = std::sync::mpsc::channel();
        let out = Shared::default();
        let log = AuditLog::to_writer(Box::new(Gated {
            open: gate,
            opened: false,
            out: out.clone(),
        }));
        // Nothing recorded: nothing to wait for.
        assert!(log.sync(Duration::ZERO));
        record(&log, 1);
        record(&log, 2);
        // The sink holds the lines back: the wait ends at its timeout, unwritten.
        assert!(!log.sync(Duration::from_millis(50)));
        open.send(())?;
        assert!(log.sync(Duration::from_secs(60)));
        let text = out.text()?;
        assert_eq!(text.lines().count(), 2, "{text}");
        Ok(())
    }

    #[test]
    fn times_are_rfc3339_utc_with_microseconds() {
        let at = |secs: u64, micros: u64| {
            rfc3339(
                SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros),
            )
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.000005Z");
        assert_eq!(at(1_796_150_401, 123_456), "2026-12-01T18:40:01.123456Z");
        assert_eq!(at(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
        // A clock before the epoch or past year 9999 is clamped.
        assert_eq!(
            rfc3339(SystemTime::UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000000Z"
        );
        assert_eq!(at(300_000_000_000, 0), "9999-12-31T23:59:59.999999Z");
    }
}

//! What a plugin writes to stdout and stderr: captured per instance, bounded per
//! call, and logged as data.
//!
//! A plugin's output is whatever its input made it print, and its input comes from
//! an agent. Copied to the server's stderr byte for byte it let an agent forge log
//! and audit lines (a printed `{"subject":"admin",...}` is a line like any other),
//! send terminal escapes, and fill a disk (hundreds of MB per execution). Here each
//! stream keeps at most [`OUTPUT_PER_CALL`] bytes per call and counts the rest;
//! after the call the kept text becomes one log event whose fields name the
//! plugin, the capability and the execution, with every control character escaped,
//! so it can never start a line of its own. It never reaches the audit log.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Bytes of one stream kept per call; the rest is counted and dropped.
pub const OUTPUT_PER_CALL: usize = 64 * 1024;

/// The two output streams of one plugin instance (shared by the instances an
/// execution makes of one plugin, so nothing is lost when one is replaced).
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// What the plugin wrote to stdout.
    pub stdout: Capture,
    /// What the plugin wrote to stderr.
    pub stderr: Capture,
}

impl Output {
    /// Logs what both streams captured since the last call of this (one event per
    /// stream that has anything), then starts them afresh.
    pub fn emit(&self, plugin: &str, capability: &str, execution: Option<u64>) {
        for (stream, capture) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let Some(captured) = capture.take() else {
                continue;
            };
            let text = String::from_utf8_lossy(&captured.bytes);
            // `?`: the text is quoted with every control character (newlines and
            // escapes included) written as an escape, so it stays inside this line.
            tracing::info!(
                plugin = %plugin,
                capability = %capability,
                execution,
                stream,
                dropped_bytes = captured.dropped,
                output = ?text,
                "plugin output"
            );
        }
    }
}

/// One output stream of a plugin: the first [`OUTPUT_PER_CALL`] bytes since it was
/// last taken, and how many more were written.
#[derive(Debug, Clone, Default)]
pub struct Capture(Arc<Shared>);

/// A [`Capture`]'s state, shared by its clones.
#[derive(Debug, Default)]
struct Shared {
    /// Set by a write, cleared by a take: a call that printed nothing (most) costs
    /// its take no lock.
    written: AtomicBool,
    captured: Mutex<Captured>,
}

/// What a [`Capture`] holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// The bytes kept, at most [`OUTPUT_PER_CALL`].
    pub bytes: Vec<u8>,
    /// The bytes written past that and dropped.
    pub dropped: u64,
}

impl Capture {
    /// Keeps what fits of `bytes` and counts the rest: a plugin never sees its
    /// output refused (a refused write would make many languages' `print` panic).
    fn keep(&self, bytes: &[u8]) {
        let Ok(mut captured) = self.0.captured.lock() else {
            return;
        };
        let room = OUTPUT_PER_CALL.saturating_sub(captured.bytes.len());
        let kept = bytes.len().min(room);
        captured.bytes.extend_from_slice(&bytes[..kept]);
        captured.dropped = captured.dropped.saturating_add((bytes.len() - kept) as u64);
        drop(captured);
        self.0.written.store(true, Ordering::Release);
    }

    /// What was captured since the last take, or `None` when nothing was written.
    pub fn take(&self) -> Option<Captured> {
        if !self.0.written.swap(false, Ordering::Acquire) {
            return None;
        }
        let mut captured = self.0.captured.lock().ok()?;
        if captured.bytes.is_empty() && captured.dropped == 0 {
            return None;
        }
        Some(std::mem::take(&mut *captured))
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always ready for a full write: what does not fit is counted, not refused.
        Ok(OUTPUT_PER_CALL)
    }
}

impl Pollable for Capture {
    // The desugared form of `async fn ready(&mut self) {}`: always ready.
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(std::future::ready(()))
    }
}

impl AsyncWrite for Capture {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.keep(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_bytes_of_a_call_and_counts_the_rest() {
        let mut capture = Capture::default();
        assert_eq!(capture.take(), None);
        capture
            .write(Bytes::from(vec![b'a'; OUTPUT_PER_CALL - 1]))
            .expect("write");
        capture.write(Bytes::from_static(b"bcd")).expect("write");
        assert_eq!(capture.check_write().expect("room"), OUTPUT_PER_CALL);
        let captured = capture.take().expect("captured");
        assert_eq!(captured.bytes.len(), OUTPUT_PER_CALL);
        assert_eq!(captured.bytes.last(), Some(&b'b'));
        assert_eq!(captured.dropped, 2);
        // The next call starts afresh.
        capture.write(Bytes::from_static(b"x")).expect("write");
        assert_eq!(
            capture.take(),
            Some(Captured {
                bytes: b"x".to_vec(),
                dropped: 0
            })
        );
    }
}

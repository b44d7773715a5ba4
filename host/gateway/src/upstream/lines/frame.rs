//! The framing layer under rmcp's stdio transport: the child's stdout copied to
//! rmcp line by line, each line bounded first (see [`super`]'s documentation for
//! what is bounded and why).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use super::scan::{IdScan, one_value};
use super::survey::{Survey, pruned};
use crate::upstream::bounds::{
    MAX_MESSAGE_BYTES, MAX_MESSAGE_DEPTH, MAX_MESSAGE_TEXT, MAX_MESSAGE_VALUES, OVERSIZED_CODE,
    TOO_DEEP_CODE, made_up_answer,
};

/// How long the rest of a line may take once its first byte came.
pub const UNTERMINATED_LINE: Duration = Duration::from_secs(5);

/// The IDs (as JSON text) of the `tools/list` requests not yet answered: their
/// answers are pruned rather than refused when nested too deep.
pub type Listing = Arc<Mutex<HashSet<String>>>;

/// Copies the lines of `stdout` (upstream `upstream`'s) to `rmcp`, each as
/// [`frame`] has it, until the child's stdout ends or a line is left
/// unterminated or glued to another; then shuts `rmcp` down, which rmcp reads as
/// the end of the session. (A write after rmcp dropped its end waits forever:
/// [`super::ChildLines`] aborts this task when it is closed or dropped.)
pub async fn pump(
    upstream: String,
    stdout: impl AsyncRead + Unpin,
    mut rmcp: impl AsyncWrite + Unpin,
    listing: Listing,
) {
    copy(&upstream, stdout, &mut rmcp, &listing).await;
    let _ = rmcp.shutdown().await;
}

/// [`pump`]'s copying, until it stops.
async fn copy(
    upstream: &str,
    stdout: impl AsyncRead + Unpin,
    rmcp: &mut (impl AsyncWrite + Unpin),
    listing: &Listing,
) {
    let mut lines = Lines::new(stdout);
    loop {
        let read;
        let framed = match lines.next().await {
            Read::Line(line) => {
                read = line;
                frame(upstream, &read, listing)
            }
            Read::Oversized(Some(id)) => {
                tracing::warn!(upstream = %upstream, max_bytes = MAX_MESSAGE_BYTES, "upstream sent a message over the limit; its request gets an error");
                made_up(
                    &id,
                    OVERSIZED_CODE,
                    &format!("the result is over {MAX_MESSAGE_TEXT}"),
                )
            }
            Read::Oversized(None) => {
                tracing::warn!(upstream = %upstream, max_bytes = MAX_MESSAGE_BYTES, "upstream sent a message over the limit, answering nothing; left out");
                Framed::Skip
            }
            Read::Unterminated => {
                tracing::warn!(upstream = %upstream, waited_s = UNTERMINATED_LINE.as_secs(), "upstream left a line without its end; restarting it");
                return;
            }
            Read::End => return,
        };
        let line = match &framed {
            Framed::Pass(line) => line,
            Framed::Replace(line) => line.as_slice(),
            Framed::Skip => continue,
            Framed::End => return,
        };
        if rmcp.write_all(line).await.is_err()
            || rmcp.write_all(b"\n").await.is_err()
            || rmcp.flush().await.is_err()
        {
            return;
        }
    }
}

/// What becomes of one line.
#[derive(Debug, PartialEq, Eq)]
pub enum Framed<'a> {
    /// The line, as it came.
    Pass(&'a [u8]),
    /// Another line in its place: the line pruned, or a made-up answer.
    Replace(Vec<u8>),
    /// Nothing.
    Skip,
    /// The session ends.
    End,
}

/// What becomes of `line`, a whole line from upstream `upstream` (without its
/// `\n`): passed as it is, pruned, answered for, skipped, or the session ended.
pub fn frame<'a>(upstream: &str, line: &'a [u8], listing: &Listing) -> Framed<'a> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Framed::Skip;
    }
    let survey = match Survey::of(line) {
        Ok(survey) => survey,
        Err(error) => {
            let glued = line.trim_ascii_start().starts_with(b"{")
                && !one_value(line)
                && line.windows(9).any(|bytes| bytes == b"\"jsonrpc\"");
            if glued {
                tracing::warn!(upstream = %upstream, "upstream sent a message glued to an unfinished line; restarting it");
                return Framed::End;
            }
            let head = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
            tracing::warn!(upstream = %upstream, reason = %error, line = ?head, "upstream sent a line that is not a JSON-RPC message; left out");
            return Framed::Skip;
        }
    };
    if !survey.is_message() {
        // rmcp would answer it, unasked, on the child's stdin.
        let head = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
        tracing::warn!(upstream = %upstream, line = ?head, "upstream sent a line that is not a JSON-RPC message; left out");
        return Framed::Skip;
    }
    // An answer is here: its request is no longer awaited. (A request of the
    // upstream's own, with an ID of its own numbering, answers nothing.)
    let answer = survey.is_answer();
    let answers_listing = answer
        && survey.id.as_ref().is_some_and(|id| {
            listing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id)
        });
    let too_deep = survey.deepest > MAX_MESSAGE_DEPTH;
    let refusal = if survey.values > MAX_MESSAGE_VALUES {
        format!("the result holds more than {MAX_MESSAGE_VALUES} values")
    } else if too_deep && !answers_listing {
        format!("the result is nested deeper than {MAX_MESSAGE_DEPTH} levels")
    } else if too_deep {
        // A tool list keeps its tools: schemas are read only 32 levels deep.
        return match pruned(line, MAX_MESSAGE_DEPTH).and_then(|json| serde_json::to_vec(&json)) {
            Ok(pruned) => Framed::Replace(pruned),
            Err(_) => Framed::Skip,
        };
    } else {
        return Framed::Pass(line);
    };
    match &survey.id {
        Some(id) if answer => made_up(id, TOO_DEEP_CODE, &refusal),
        Some(_) | None => {
            tracing::warn!(upstream = %upstream, max_depth = MAX_MESSAGE_DEPTH, max_values = MAX_MESSAGE_VALUES, "upstream sent a message nested too deep or too large, answering nothing; left out");
            Framed::Skip
        }
    }
}

/// The made-up answer to request `id` as a line, or nothing when `id` is not a
/// request ID.
fn made_up<'a>(id: &str, code: i32, detail: &str) -> Framed<'a> {
    match made_up_answer(id, code, detail).and_then(|json| serde_json::to_vec(&json).ok()) {
        Some(line) => Framed::Replace(line),
        None => Framed::Skip,
    }
}

/// Reads whole lines from a child's stdout (`R`) without keeping more than
/// [`MAX_MESSAGE_BYTES`] of one, nor waiting more than [`UNTERMINATED_LINE`] for
/// a line's end once it began.
struct Lines<R> {
    stdout: BufReader<R>,
    /// The line being read (never more than [`MAX_MESSAGE_BYTES`]).
    line: Vec<u8>,
    /// Set once the line being read passed the limit: what is known of its ID.
    oversized: Option<IdScan>,
}

/// What [`Lines::next`] read.
enum Read {
    Line(Vec<u8>),
    Oversized(Option<String>),
    Unterminated,
    End,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    fn new(stdout: R) -> Self {
        Self {
            stdout: BufReader::with_capacity(64 * 1024, stdout),
            line: Vec::new(),
            oversized: None,
        }
    }

    /// The next whole line's outcome, reading as much as needed.
    async fn next(&mut self) -> Read {
        let mut started = None;
        loop {
            let available = match started {
                Some(started) => {
                    match tokio::time::timeout_at(
                        started + UNTERMINATED_LINE,
                        self.stdout.fill_buf(),
                    )
                    .await
                    {
                        Ok(read) => read,
                        Err(_) => return Read::Unterminated,
                    }
                }
                None => self.stdout.fill_buf().await,
            };
            let available = match available {
                Ok([]) | Err(_) => return Read::End,
                Ok(bytes) => bytes,
            };
            started.get_or_insert_with(tokio::time::Instant::now);
            let (part, done) = match available.iter().position(|&b| b == b'\n') {
                Some(end) => (&available[..end], true),
                None => (available, false),
            };
            match &mut self.oversized {
                Some(scan) => scan.feed(part),
                None if self.line.len() + part.len() > MAX_MESSAGE_BYTES => {
                    let mut scan = IdScan::default();
                    scan.feed(&self.line);
                    scan.feed(part);
                    self.line = Vec::new();
                    self.oversized = Some(scan);
                }
                None => self.line.extend_from_slice(part),
            }
            let consumed = part.len() + usize::from(done);
            self.stdout.consume(consumed);
            if done {
                return match self.oversized.take() {
                    Some(scan) => Read::Oversized(scan.id()),
                    None => Read::Line(std::mem::take(&mut self.line)),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(line: &str, listing: &Listing) -> Framed<'static> {
        let line: &'static str = Box::leak(line.to_owned().into_boxed_str());
        frame("up", line.as_bytes(), listing)
    }

    fn made_up_text(id: &str, code: i32, detail: &str) -> Framed<'static> {
        let answer = made_up_answer(id, code, detail).unwrap_or_default();
        Framed::Replace(serde_json::to_vec(&answer).unwrap_or_default())
    }

    #[test]
    fn a_plain_answer_passes_as_it_came() {
        let line = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#;
        assert_eq!(
            framed(&format!("{line}\r"), &Listing::default()),
            Framed::Pass(line.as_bytes())
        );
        assert_eq!(framed(" \t", &Listing::default()), Framed::Skip);
    }

    #[test]
    fn a_deep_tool_list_is_pruned_and_any_other_deep_answer_refused() {
        let deep = format!("{}{}", "[".repeat(150), "]".repeat(150));
        let line = format!(r#"{{"jsonrpc":"2.0","id":9,"result":{{"tools":{deep}}}}}"#);
        let listing = Listing::default();
        assert_eq!(
            framed(&line, &listing),
            made_up_text(
                "9",
                TOO_DEEP_CODE,
                "the result is nested deeper than 100 levels"
            )
        );
        listing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert("9".into());
        let Framed::Replace(pruned) = framed(&line, &listing) else {
            panic!("a tool list is pruned");
        };
        let survey = Survey::of(&pruned).unwrap_or_default();
        assert_eq!(
            (survey.deepest, survey.id.as_deref()),
            (MAX_MESSAGE_DEPTH, Some("9"))
        );
        assert!(
            listing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty(),
            "answered"
        );
        assert_eq!(
            framed(
                &format!(r#"{{"jsonrpc":"2.0","method":"x","params":{deep}}}"#),
                &listing
            ),
            Framed::Skip
        );
    }

    #[test]
    fn an_answer_of_too_many_values_is_refused() {
        let many = vec!["0"; MAX_MESSAGE_VALUES].join(",");
        let line = format!(r#"{{"result":[{many}],"jsonrpc":"2.0","id":"r"}}"#);
        assert_eq!(
            framed(&line, &Listing::default()),
            made_up_text(
                r#""r""#,
                TOO_DEEP_CODE,
                "the result holds more than 250000 values"
            )
        );
    }

    #[test]
    fn what_is_no_message_is_left_out_and_a_request_answers_nothing() {
        assert_eq!(
            framed(r#"{"level":30,"msg":"listening"}"#, &Listing::default()),
            Framed::Skip
        );
        assert_eq!(framed("[1,2]", &Listing::default()), Framed::Skip);
        let deep = format!("{}{}", "[".repeat(150), "]".repeat(150));
        let listing = Listing::default();
        listing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert("3".into());
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{deep}}}"#
        );
        assert_eq!(
            framed(&request, &listing),
            Framed::Skip,
            "not an answer to 3"
        );
        assert_eq!(
            listing.lock().unwrap_or_else(PoisonError::into_inner).len(),
            1
        );
        let many_in_id = format!(
            r#"{{"jsonrpc":"2.0","id":[{}],"result":{{}}}}"#,
            vec!["0"; MAX_MESSAGE_VALUES].join(",")
        );
        assert_eq!(framed(&many_in_id, &listing), Framed::Skip);
    }

    #[test]
    fn a_glued_line_ends_the_session_and_a_bad_one_is_skipped() {
        let glued = r#"{"jsonrpc": "2.0", "id": 4, "res{"jsonrpc":"2.0","id":5,"result":{}}"#;
        assert_eq!(framed(glued, &Listing::default()), Framed::End);
        assert_eq!(
            framed("Starting the server", &Listing::default()),
            Framed::Skip
        );
        let huge = format!(
            r#"{{"jsonrpc":"2.0","id":6,"result":{{"n":1{}}}}}"#,
            "0".repeat(400)
        );
        assert_eq!(framed(&huge, &Listing::default()), Framed::Skip);
        let tab = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"a\tb\"}}";
        assert_eq!(framed(tab, &Listing::default()), Framed::Skip, "not glued");
    }

    #[tokio::test]
    async fn an_oversized_line_is_not_kept_but_its_id_is_found() {
        let (read, mut write) = tokio::io::simplex(1 << 16);
        let mut lines = Lines::new(read);
        let writer = tokio::spawn(async move {
            let text = "x".repeat(MAX_MESSAGE_BYTES);
            let line = format!(
                r#"{{"result":{{"content":[{{"type":"text","text":"{text}"}}]}},"jsonrpc":"2.0","id":42}}"#
            );
            write.write_all(line.as_bytes()).await?;
            write
                .write_all(b"\n{\"jsonrpc\":\"2.0\",\"id\":43,\"result\":{}}\n")
                .await?;
            write.shutdown().await
        });
        assert!(matches!(lines.next().await, Read::Oversized(Some(id)) if id == "42"));
        assert!(lines.line.capacity() <= MAX_MESSAGE_BYTES);
        assert!(matches!(lines.next().await, Read::Line(line) if line.ends_with(b"{}}")));
        assert!(matches!(lines.next().await, Read::End));
        assert!(matches!(writer.await, Ok(Ok(()))));
    }

    #[tokio::test]
    async fn the_pump_copies_framed_lines_and_ends_with_the_child_s_stdout() {
        use tokio::io::AsyncReadExt;
        let (stdout, mut child) = tokio::io::simplex(1 << 10);
        let (mut rmcp, into) = tokio::io::simplex(1 << 10);
        let pump = tokio::spawn(pump("up".into(), stdout, into, Listing::default()));
        let written = async move {
            child
                .write_all(b"Starting\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\r\n")
                .await?;
            child.shutdown().await
        };
        assert!(written.await.is_ok());
        let mut copied = String::new();
        let read = rmcp.read_to_string(&mut copied);
        let read = tokio::time::timeout(std::time::Duration::from_secs(30), read).await;
        assert!(matches!(read, Ok(Ok(_))), "the copy ends: {read:?}");
        assert_eq!(copied, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
        assert!(pump.await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_line_left_without_its_end_is_given_up() {
        let (read, mut write) = tokio::io::simplex(1 << 16);
        let mut lines = Lines::new(read);
        assert!(
            write
                .write_all(br#"{"jsonrpc":"2.0","id":1,"res"#)
                .await
                .is_ok()
        );
        assert!(matches!(lines.next().await, Read::Unterminated));
        drop(write);
    }
}

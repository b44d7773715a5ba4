//! The stdio transport of an upstream child, bounded against what a hostile child
//! writes: one JSON-RPC message per line, as MCP's stdio transport says.
//!
//! rmcp's own transport (a) drops a line over 16 MiB and forgets it, so the call
//! it answered waits out its whole budget; (b) parses with serde's recursion limit,
//! so one tool schema nested ~62 levels deep lost the whole tool list; and (c)
//! waits forever for a line's end, so a child that writes half a line glues the
//! next answers to it and loses them. Here:
//! - a line over [`MAX_MESSAGE_BYTES`] is not kept, but its top-level `"id"` is
//!   read as it streams by, and the request it answers gets an error at once
//!   ([`OVERSIZED_CODE`]); the line itself never occupies memory;
//! - a line nested deeper than [`MAX_MESSAGE_DEPTH`] has its deeper values made
//!   `null` when it answers `tools/list` (schemas read only 32 levels anyway), and
//!   answers any other request with an error ([`TOO_DEEP_CODE`]);
//! - a line left without its end for [`UNTERMINATED_LINE`], or a line that is not
//!   JSON but holds a JSON-RPC message (an answer glued to a half line), ends the
//!   session: the supervisor marks the upstream unavailable and restarts it.
//!
//! Closing the transport closes the child's stdin, waits, then ends its process
//! group (SIGTERM, then SIGKILL), as MCP's stdio shutdown says.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value as Json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The largest message an upstream child may send: a longer line is answered with
/// an error, not read.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The limit's text in the error a call gets.
pub const MAX_MESSAGE_TEXT: &str = "16 MiB";

/// The deepest nesting of a message read as is (serde's own limit is 128).
pub const MAX_MESSAGE_DEPTH: usize = 100;

/// The most values (objects, arrays and the items in them) one message may hold:
/// parsed, each costs far more than its text (a 16 MiB line of `{"a":0},` made
/// more than 1 GB of maps).
pub const MAX_MESSAGE_VALUES: usize = 250_000;

/// How long the rest of a line may take once its first byte came.
pub const UNTERMINATED_LINE: Duration = Duration::from_secs(5);

/// The JSON-RPC error code of the answer made up for a result over
/// [`MAX_MESSAGE_BYTES`] (in the range JSON-RPC leaves to implementations).
pub const OVERSIZED_CODE: i32 = -32_090;

/// The JSON-RPC error code of the answer made up for a result nested deeper than
/// [`MAX_MESSAGE_DEPTH`] or holding more than [`MAX_MESSAGE_VALUES`] values.
pub const TOO_DEEP_CODE: i32 = -32_091;

/// The `data` of a made-up answer: an upstream's own error may use the same code,
/// but never carries this marker from this process.
pub fn made_up_marker() -> &'static str {
    static MARKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MARKER.get_or_init(|| {
        let mut random = [0u8; 16];
        let _ = getrandom::fill(&mut random);
        format!("codemode-host/{}", blake3::hash(&random).to_hex())
    })
}

/// How long closing waits for the child after closing its stdin, and again after
/// SIGTERM.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

/// The most `tools/list` requests awaiting an answer that are remembered.
const MAX_LISTING: usize = 64;

/// A child's stdio as an rmcp transport (see the module's documentation).
pub struct ChildLines {
    upstream: String,
    child: Child,
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    stdout: BufReader<ChildStdout>,
    /// The line being read (never more than [`MAX_MESSAGE_BYTES`]).
    line: Vec<u8>,
    /// Set once the line being read passed the limit: what is known of its ID.
    oversized: Option<IdScan>,
    /// When the first byte of the line being read came.
    started: Option<tokio::time::Instant>,
    /// The IDs (as JSON text) of the `tools/list` requests not yet answered.
    listing: Arc<Mutex<HashSet<String>>>,
}

impl ChildLines {
    /// The transport of `child` (spawned with piped stdin and stdout) of upstream
    /// `upstream`.
    ///
    /// # Errors
    ///
    /// The child has no piped stdin or stdout.
    pub fn new(upstream: &str, mut child: Child) -> Result<Self, String> {
        let stdin = child.stdin.take().ok_or("the child has no stdin")?;
        let stdout = child.stdout.take().ok_or("the child has no stdout")?;
        Ok(Self {
            upstream: upstream.to_owned(),
            child,
            stdin: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            stdout: BufReader::with_capacity(64 * 1024, stdout),
            line: Vec::new(),
            oversized: None,
            started: None,
            listing: Arc::default(),
        })
    }

    /// The child's process ID (its process group's).
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// The next whole line's outcome, reading as much as needed. Cancel-safe: a
    /// partial line stays in `self`.
    async fn next_line(&mut self) -> Read {
        loop {
            let available = match self.started {
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
                Ok([]) => return Read::End,
                Ok(bytes) => bytes,
                Err(_) => return Read::End,
            };
            if self.started.is_none() {
                self.started = Some(tokio::time::Instant::now());
            }
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
                self.started = None;
                return match self.oversized.take() {
                    Some(scan) => Read::Oversized(scan.id()),
                    None => Read::Line(std::mem::take(&mut self.line)),
                };
            }
        }
    }

    /// The message `line` holds, or what to do instead (see the module's
    /// documentation).
    fn message(&self, line: &[u8]) -> Parsed {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Parsed::Skip;
        }
        let (depth, values, id) = depth_values_and_id(line);
        if values > MAX_MESSAGE_VALUES {
            return match id {
                Some(id) => made_up_error(
                    &id,
                    TOO_DEEP_CODE,
                    &format!("the result holds more than {MAX_MESSAGE_VALUES} values"),
                )
                .map_or(Parsed::Skip, |message| Parsed::Message(Box::new(message))),
                None => Parsed::TooDeep,
            };
        }
        let pruned;
        let line = if depth > MAX_MESSAGE_DEPTH {
            let listing = id.as_ref().is_some_and(|id| self.is_listing(id));
            match (listing, &id) {
                (true, _) => {
                    pruned = prune(line, MAX_MESSAGE_DEPTH);
                    pruned.as_slice()
                }
                (false, Some(id)) => {
                    return made_up_error(
                        id,
                        TOO_DEEP_CODE,
                        &format!("the result is nested deeper than {MAX_MESSAGE_DEPTH} levels"),
                    )
                    .map_or(Parsed::Skip, |message| Parsed::Message(Box::new(message)));
                }
                (false, None) => return Parsed::TooDeep,
            }
        } else {
            line
        };
        match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
            Ok(message) => {
                if let Some(id) = id {
                    self.answered(&id);
                }
                Parsed::Message(Box::new(message))
            }
            Err(error) => {
                // Half a message (it starts like one) with another after it. A
                // line of text that quotes a message is only left out.
                let glued = line.trim_ascii_start().starts_with(b"{")
                    && !one_value(line)
                    && contains(line, b"\"jsonrpc\"");
                if glued {
                    Parsed::Glued
                } else {
                    Parsed::Invalid(error.to_string())
                }
            }
        }
    }

    /// Whether `id` is that of a `tools/list` request not yet answered.
    fn is_listing(&self, id: &str) -> bool {
        self.listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(id)
    }

    /// Forgets request `id` (it was answered).
    fn answered(&self, id: &str) {
        self.listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }
}

/// One line read, or why there is none.
enum Read {
    /// A whole line (without its newline).
    Line(Vec<u8>),
    /// A line over the limit, and its top-level ID as JSON text, if it had one.
    Oversized(Option<String>),
    /// A line's end did not come in time.
    Unterminated,
    /// The child closed its stdout (or reading it failed).
    End,
}

/// What a whole line is.
enum Parsed {
    Message(Box<RxJsonRpcMessage<RoleClient>>),
    /// Blank.
    Skip,
    /// Not a JSON-RPC message (logged and left out, as the SDKs do).
    Invalid(String),
    /// Not JSON, but holding a JSON-RPC message: an answer glued to a half line.
    Glued,
    /// Nested too deep, and no request to answer.
    TooDeep,
}

impl Transport<RoleClient> for ChildLines {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let stdin = self.stdin.clone();
        let listing = self.listing.clone();
        async move {
            let mut text = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            if let rmcp::model::JsonRpcMessage::Request(request) = &item
                && matches!(
                    request.request,
                    rmcp::model::ClientRequest::ListToolsRequest(_)
                )
                && let Ok(id) = serde_json::to_string(&request.id)
            {
                let mut listing = listing
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // Requests never answered (abandoned) are not kept for ever.
                if listing.len() >= MAX_LISTING {
                    listing.clear();
                }
                listing.insert(id);
            }
            text.push(b'\n');
            let mut stdin = stdin.lock().await;
            let Some(stdin) = stdin.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the child's stdin is closed",
                ));
            };
            stdin.write_all(&text).await?;
            stdin.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let line = match self.next_line().await {
                Read::Line(line) => line,
                Read::Oversized(Some(id)) => {
                    tracing::warn!(upstream = %self.upstream, max_bytes = MAX_MESSAGE_BYTES, "upstream sent a message over the limit; its request gets an error");
                    let detail = format!("the result is over {MAX_MESSAGE_TEXT}");
                    match made_up_error(&id, OVERSIZED_CODE, &detail) {
                        Some(message) => return Some(message),
                        None => continue,
                    }
                }
                Read::Oversized(None) => {
                    tracing::warn!(upstream = %self.upstream, max_bytes = MAX_MESSAGE_BYTES, "upstream sent a message over the limit, answering nothing; left out");
                    continue;
                }
                Read::Unterminated => {
                    tracing::warn!(upstream = %self.upstream, waited_s = UNTERMINATED_LINE.as_secs(), "upstream left a line without its end; restarting it");
                    return None;
                }
                Read::End => return None,
            };
            match self.message(&line) {
                Parsed::Message(message) => return Some(*message),
                Parsed::Skip => {}
                Parsed::Invalid(reason) => {
                    let head = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
                    tracing::warn!(upstream = %self.upstream, reason = %reason, line = ?head, "upstream sent a line that is not a JSON-RPC message; left out");
                }
                Parsed::Glued => {
                    tracing::warn!(upstream = %self.upstream, "upstream sent a message glued to an unfinished line; restarting it");
                    return None;
                }
                Parsed::TooDeep => {
                    tracing::warn!(upstream = %self.upstream, max_depth = MAX_MESSAGE_DEPTH, "upstream sent a message nested too deep, answering nothing; left out");
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // A send may hold stdin, blocked on a child that no longer reads: past the
        // grace it is left to the kill below.
        if let Ok(mut stdin) = tokio::time::timeout(CLOSE_GRACE, self.stdin.lock()).await {
            drop(stdin.take());
        }
        let group = self.child.id();
        if tokio::time::timeout(CLOSE_GRACE, self.child.wait())
            .await
            .is_err()
        {
            if let Some(group) = group {
                crate::children::signal_group_terminate(group);
            }
            // Waiting on the child reaps it the moment it exits.
            if tokio::time::timeout(CLOSE_GRACE, self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
            }
        }
        // Whatever else of its group is left (its own children) goes too.
        if let Some(group) = group {
            crate::children::kill_group(group);
        }
        Ok(())
    }
}

/// An error answer to request `id` (JSON text) with `code` and `message`.
pub fn made_up_error(id: &str, code: i32, message: &str) -> Option<RxJsonRpcMessage<RoleClient>> {
    let id: Json = serde_json::from_str(id).ok()?;
    let answer = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message, "data": made_up_marker()},
    });
    serde_json::from_value(answer).ok()
}

/// Whether `haystack` holds `needle`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Whether `line` holds one JSON object or array and nothing after it, as far as
/// brackets and strings tell (not whether its numbers or escapes are valid): a
/// half line with an answer glued to it does not.
fn one_value(line: &[u8]) -> bool {
    let text = line.trim_ascii();
    if !matches!(text.first(), Some(b'{' | b'[')) {
        return false;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (at, &byte) in text.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return at + 1 == text.len();
                }
            }
            _ => {}
        }
    }
    false
}

/// The deepest nesting of the JSON text `line` (strings skipped), how many values
/// it holds at most (objects, arrays and the items in them), and its top-level
/// `"id"` as JSON text.
fn depth_values_and_id(line: &[u8]) -> (usize, usize, Option<String>) {
    let mut scan = IdScan::default();
    scan.feed(line);
    (scan.deepest, scan.values, scan.id())
}

/// `line` with every value that starts deeper than `max` made `null`.
fn prune(line: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    // While skipping a value too deep: the depth it started at.
    let mut skipping: Option<usize> = None;
    for &byte in line {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            if skipping.is_none() {
                out.push(byte);
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max && skipping.is_none() {
                    skipping = Some(depth);
                    out.extend_from_slice(b"null");
                    continue;
                }
            }
            b'}' | b']' => {
                let closing = depth;
                depth = depth.saturating_sub(1);
                if skipping == Some(closing) {
                    skipping = None;
                    continue;
                }
            }
            _ => {}
        }
        if skipping.is_none() {
            out.push(byte);
        }
    }
    out
}

/// Reads a JSON text as it streams by, keeping only its deepest nesting and its
/// top-level `"id"` (at most 256 bytes of it).
#[derive(Default)]
struct IdScan {
    depth: usize,
    deepest: usize,
    /// Objects, arrays and the separators between items: at least the values.
    values: usize,
    in_string: bool,
    escaped: bool,
    /// Whether the current top-level string is a key (no `:` seen after the last
    /// `,` or `{`).
    in_key: bool,
    /// The current top-level key, up to 3 bytes (enough to tell `id`).
    key: Vec<u8>,
    /// Whether the last top-level key was `id`.
    id_key: bool,
    /// The top-level value being read is the ID's.
    capturing: bool,
    id: Vec<u8>,
    found: Option<Vec<u8>>,
}

/// The most bytes of an ID kept.
const MAX_ID_BYTES: usize = 256;

impl IdScan {
    fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.byte(byte);
        }
    }

    fn byte(&mut self, byte: u8) {
        if self.capturing
            && self.id.len() < MAX_ID_BYTES
            && !(byte.is_ascii_whitespace() && !self.in_string)
        {
            self.id.push(byte);
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
                if self.depth == 1 && self.in_key {
                    self.id_key = self.key == b"id";
                }
            } else if self.depth == 1 && self.in_key && self.key.len() < 3 {
                self.key.push(byte);
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.in_key {
                    self.key.clear();
                }
            }
            b':' if self.depth == 1 => {
                self.in_key = false;
                if self.id_key {
                    self.capturing = true;
                    self.id.clear();
                }
            }
            b',' if self.depth == 1 => {
                self.values += 1;
                self.finish_id();
                self.in_key = true;
                self.id_key = false;
            }
            b',' => self.values += 1,
            b'{' | b'[' => {
                self.values += 1;
                self.depth += 1;
                self.deepest = self.deepest.max(self.depth);
                if self.depth == 1 {
                    self.in_key = byte == b'{';
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.finish_id();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            _ => {}
        }
    }

    /// The ID value being read ended (at a top-level `,` or `}`).
    fn finish_id(&mut self) {
        if self.capturing {
            self.capturing = false;
            // The `,` or `}` that ended it was pushed too.
            self.id.pop();
            self.found = Some(std::mem::take(&mut self.id));
        }
    }

    /// The top-level ID, as JSON text.
    fn id(&self) -> Option<String> {
        let id = self.found.as_ref()?;
        (!id.is_empty()).then(|| String::from_utf8_lossy(id).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_and_id(line: &[u8]) -> (usize, Option<String>) {
        let (depth, _, id) = depth_values_and_id(line);
        (depth, id)
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_stands() {
        let cases: [(&str, Option<&str>); 6] = [
            (r#"{"jsonrpc":"2.0","id":7,"result":{"id":99}}"#, Some("7")),
            (
                r#"{"result":{"id":99,"x":[{"id":1}]},"jsonrpc":"2.0","id":"a\"b"}"#,
                Some(r#""a\"b""#),
            ),
            (r#"{ "id" : 12 , "result" : {} }"#, Some("12")),
            (r#"{"method":"notifications/x","params":{"id":3}}"#, None),
            (r#"{"idx":1,"result":"id"}"#, None),
            (r#"{"result":"}\"{","id":5}"#, Some("5")),
        ];
        for (line, id) in cases {
            assert_eq!(depth_and_id(line.as_bytes()).1.as_deref(), id, "{line}");
        }
    }

    #[test]
    fn an_id_is_found_in_a_line_read_in_pieces() {
        let line = format!(
            r#"{{"result":{{"content":[{{"type":"text","text":"{}"}}]}},"jsonrpc":"2.0","id":42}}"#,
            "x".repeat(1000)
        );
        let mut scan = IdScan::default();
        for piece in line.as_bytes().chunks(7) {
            scan.feed(piece);
        }
        assert_eq!(scan.id().as_deref(), Some("42"));
        assert_eq!(scan.deepest, 4);
    }

    #[test]
    fn values_are_counted_outside_strings() {
        assert_eq!(
            depth_values_and_id(br#"[{"a":0},{"a":0},{"a":"x,y"}]"#).1,
            6
        );
    }

    #[test]
    fn values_too_deep_become_null_and_the_rest_stays() {
        let line = br#"{"a":[[["x",{"b":"]}"}]]],"c":1}"#;
        assert_eq!(depth_and_id(line).0, 5);
        assert_eq!(
            String::from_utf8_lossy(&prune(line, 3)),
            r#"{"a":[[null]],"c":1}"#
        );
        assert_eq!(prune(line, 5), line.to_vec(), "nothing deeper than 5");
        let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
        let pruned = prune(deep.as_bytes(), MAX_MESSAGE_DEPTH);
        let parsed: Json = serde_json::from_slice(&pruned).expect("parses after pruning");
        assert!(parsed.is_array());
        assert_eq!(depth_and_id(&pruned).0, MAX_MESSAGE_DEPTH);
    }

    #[test]
    fn a_half_line_with_an_answer_glued_to_it_is_told_from_a_bad_number() {
        let glued = br#"{"jsonrpc": "2.0", "id": 4, "res{"jsonrpc":"2.0","id":5,"result":{}}"#;
        assert!(!one_value(glued));
        let after = br#"{"jsonrpc":"2.0","id":5,"result":{}} {"jsonrpc":"2.0"}"#;
        assert!(!one_value(after));
        let huge_number = format!(
            r#"{{"jsonrpc":"2.0","id":6,"result":{{"n":1{}}}}}"#,
            "0".repeat(400)
        );
        assert!(one_value(huge_number.as_bytes()), "{huge_number}");
        assert!(one_value(br#" {"a":"}{"} "#));
        assert!(!one_value(b"Starting the server"));
    }

    #[test]
    fn made_up_errors_answer_the_request() {
        let message = made_up_error("\"q-1\"", OVERSIZED_CODE, "the result is over 16 MiB");
        let text = serde_json::to_string(&message).unwrap_or_default();
        assert_eq!(
            text,
            format!(
                r#"{{"jsonrpc":"2.0","id":"q-1","error":{{"code":-32090,"message":"the result is over 16 MiB","data":"{}"}}}}"#,
                made_up_marker()
            )
        );
        assert!(made_up_marker().starts_with("codemode-host/"));
        assert!(made_up_error("not json", OVERSIZED_CODE, "x").is_none());
    }
}

//! The stdio transport: one JSON-RPC message per line, read by a thread of its own
//! and written by another.
//!
//! rmcp's own stdio transport ignores a line that is not JSON and one over its
//! length limit without a word, so a client that sent either waits forever for its
//! answer. Here every line gets an answer: one that is not JSON a `-32700` parse
//! error, one that is JSON but not a JSON-RPC message a `-32600` (with its `id`
//! when one can be read), one over [`MAX_LINE_BYTES`] a `-32600` naming the limit.
//!
//! The round trip stays short. When stdin is a pipe (as every MCP client starts
//! its server), it is read by a task on the server's own runtime, which waits for
//! input in the same `epoll` as everything else: a request wakes the one thread
//! that answers it, with no hand-off from a reader thread (a wake of an idle thread
//! costs tens of µs on a virtual machine). Other input (a terminal, a file) is read
//! by a thread of its own, never through tokio's blocking pool. A writer thread
//! writes each response in one call and flushes whenever nothing else is waiting.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::thread::JoinHandle;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};

/// The longest line (one message) read, in bytes: the limit of rmcp's own stdio
/// transport and of its HTTP client's events.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC's code for a message that is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's code for JSON that is not a valid request.
const INVALID_REQUEST: i64 = -32600;

/// The message of a `-32700` answer.
pub const PARSE_ERROR_MESSAGE: &str = "Parse error: a line must be one JSON-RPC message";
/// The message of a `-32600` answer to JSON that is not a JSON-RPC message.
pub const INVALID_REQUEST_MESSAGE: &str = "Invalid Request: not a JSON-RPC 2.0 message";
/// The message of a `-32600` answer to a line over [`MAX_LINE_BYTES`].
pub const TOO_LONG_MESSAGE: &str = "Invalid Request: a message line may be at most 16 MiB";

/// How long closing waits for the writer to write what was sent before (a client
/// that stopped reading would hold it forever).
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// What the writer thread is sent.
#[derive(Debug)]
enum Out {
    /// A line to write (with its `\n`).
    Line(Vec<u8>),
    /// Flush and stop.
    Close,
}

/// Messages read ahead of the server: enough to keep it busy, few enough that a
/// client writing faster than the server answers is slowed down.
const READ_AHEAD: usize = 64;

/// The stdio transport of one server: the reader's messages in, the writer's lines
/// out.
pub(crate) struct StdioTransport {
    incoming: tokio::sync::mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    outgoing: Option<mpsc::Sender<Out>>,
    writer: Option<JoinHandle<()>>,
}

impl StdioTransport {
    /// The process's own stdin and stdout. A pipe on stdin is read by a task of the
    /// current runtime (call this inside one); anything else by a thread.
    ///
    /// # Errors
    ///
    /// When a thread cannot be started.
    pub(crate) fn stdio() -> std::io::Result<Self> {
        // A duplicate of stdin's descriptor: tokio makes it non-blocking (which the
        // shared open file then is, for whoever else reads it: nobody, behind a
        // pipe a client made for its server) and refuses anything but a pipe.
        let pipe = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .and_then(tokio::net::unix::pipe::Receiver::from_owned_fd);
        match pipe {
            Ok(pipe) => Self::reading(std::io::stdout(), |messages, answers| {
                tokio::spawn(read_pipe(pipe, messages, answers));
                Ok(())
            }),
            Err(_) => Self::new(std::io::stdin(), std::io::stdout()),
        }
    }

    /// Reads messages from `input` and writes answers to `output`, each on a thread
    /// of its own (the reader ends at end of input, the writer when the transport
    /// closes).
    ///
    /// # Errors
    ///
    /// When a thread cannot be started.
    pub(crate) fn new(
        input: impl Read + Send + 'static,
        output: impl Write + Send + 'static,
    ) -> std::io::Result<Self> {
        Self::reading(output, |messages, answers| {
            std::thread::Builder::new()
                .name("codemode-stdin".into())
                .spawn(move || read_lines(input, &messages, &answers))
                .map(drop)
        })
    }

    /// Writes answers to `output` on a thread of its own, and starts a reader with
    /// `start_reader`, given where messages and answers go.
    fn reading(
        output: impl Write + Send + 'static,
        start_reader: impl FnOnce(
            tokio::sync::mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
            mpsc::Sender<Out>,
        ) -> std::io::Result<()>,
    ) -> std::io::Result<Self> {
        let (lines, written) = mpsc::channel::<Out>();
        let writer = std::thread::Builder::new()
            .name("codemode-stdout".into())
            .spawn(move || write_lines(&written, output))?;
        let (messages, incoming) = tokio::sync::mpsc::channel(READ_AHEAD);
        start_reader(messages, lines.clone())?;
        Ok(Self {
            incoming,
            outgoing: Some(lines),
            writer: Some(writer),
        })
    }
}

impl Transport<RoleServer> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let sent = match (serde_json::to_vec(&item), &self.outgoing) {
            (Ok(mut line), Some(outgoing)) => {
                line.push(b'\n');
                outgoing.send(Out::Line(line)).map_err(|_| closed())
            }
            (Err(error), _) => Err(std::io::Error::other(error)),
            (Ok(_), None) => Err(closed()),
        };
        std::future::ready(sent)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Every answer sent before is written before the writer stops (the reader
        // may still hold a sender, so the writer is told rather than left to notice).
        if let Some(outgoing) = self.outgoing.take() {
            let _ = outgoing.send(Out::Close);
        }
        self.incoming.close();
        if let Some(writer) = self.writer.take() {
            let joined = tokio::task::spawn_blocking(move || writer.join());
            let _ = tokio::time::timeout(CLOSE_GRACE, joined).await;
        }
        Ok(())
    }
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotConnected, "stdout is closed")
}

/// Writes each line in one call; flushes whenever no other line is waiting. Ends
/// at [`Out::Close`], when every sender is gone, or when the output fails (the
/// client went away).
fn write_lines(lines: &mpsc::Receiver<Out>, output: impl Write) {
    let mut output = std::io::BufWriter::new(output);
    while let Ok(mut next) = lines.recv() {
        loop {
            match next {
                Out::Line(line) => {
                    if output.write_all(&line).is_err() {
                        return;
                    }
                }
                Out::Close => {
                    let _ = output.flush();
                    return;
                }
            }
            match lines.try_recv() {
                Ok(out) => next = out,
                Err(_) => break,
            }
        }
        if output.flush().is_err() {
            return;
        }
    }
}

/// What one line of input is.
#[derive(Debug)]
enum Line {
    /// A message for the server.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// Nothing to do (an empty line, a notification rmcp does not know).
    Skip,
    /// An error answer to write back.
    Answer(Vec<u8>),
}

/// The buffer of a reader: room for many lines at once.
const READ_BUFFER: usize = 64 * 1024;

/// Reads lines until end of input (or until the server stops taking messages),
/// passing messages to the server and answering the lines that are not.
fn read_lines(
    input: impl Read,
    messages: &tokio::sync::mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    answers: &mpsc::Sender<Out>,
) {
    let mut input = BufReader::with_capacity(READ_BUFFER, input);
    let mut line = Vec::new();
    loop {
        let Some(parsed) = classify(read_line(&mut input, &mut line), &line) else {
            return;
        };
        let delivered = match parsed {
            Line::Message(message) => messages.blocking_send(*message).is_ok(),
            Line::Skip => true,
            Line::Answer(answer) => answers.send(Out::Line(answer)).is_ok(),
        };
        if !delivered {
            return;
        }
    }
}

/// [`read_lines`] for a pipe, as a task: the same lines, the same answers.
async fn read_pipe(
    input: tokio::net::unix::pipe::Receiver,
    messages: tokio::sync::mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    answers: mpsc::Sender<Out>,
) {
    use tokio::io::AsyncBufReadExt;
    let mut input = tokio::io::BufReader::with_capacity(READ_BUFFER, input);
    let mut line = Vec::new();
    loop {
        let read = async {
            line.clear();
            let mut too_long = false;
            loop {
                let available = input.fill_buf().await?;
                if available.is_empty() {
                    return Ok(LineRead::Eof);
                }
                let (consumed, ended) = take_line(available, &mut line, &mut too_long);
                input.consume(consumed);
                if ended {
                    return Ok(line_end(too_long));
                }
            }
        };
        let read = read.await;
        let Some(parsed) = classify(read, &line) else {
            return;
        };
        let delivered = match parsed {
            Line::Message(message) => messages.send(*message).await.is_ok(),
            Line::Skip => true,
            Line::Answer(answer) => answers.send(Out::Line(answer)).is_ok(),
        };
        if !delivered {
            return;
        }
    }
}

/// What a line read means; `None` at the end of input (or when it cannot be read).
fn classify(read: std::io::Result<LineRead>, line: &[u8]) -> Option<Line> {
    match read {
        Ok(LineRead::Line) => Some(parse(line)),
        Ok(LineRead::TooLong) => {
            tracing::warn!(
                max_bytes = MAX_LINE_BYTES,
                "a message line over the limit was refused"
            );
            Some(Line::Answer(error_line(
                &Value::Null,
                INVALID_REQUEST,
                TOO_LONG_MESSAGE,
            )))
        }
        Ok(LineRead::Eof) => None,
        Err(error) => {
            tracing::error!(reason = %error, "cannot read stdin");
            None
        }
    }
}

/// How reading one line ended.
#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    /// A whole line is in the buffer (without its `\n`).
    Line,
    /// The line was longer than [`MAX_LINE_BYTES`]; it was read to its end and
    /// dropped.
    TooLong,
    /// The input ended (a last line without `\n` is dropped: it was cut off).
    Eof,
}

/// Reads one line into `line`, never holding more than [`MAX_LINE_BYTES`] of it.
fn read_line(input: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<LineRead> {
    line.clear();
    let mut too_long = false;
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            return Ok(LineRead::Eof);
        }
        let (consumed, ended) = take_line(available, line, &mut too_long);
        input.consume(consumed);
        if ended {
            return Ok(line_end(too_long));
        }
    }
}

/// Adds what `available` holds of the line being read to `line` (or, once the line
/// is over [`MAX_LINE_BYTES`], keeps it empty and sets `too_long`). Returns how
/// many bytes were used and whether the line ended.
fn take_line(available: &[u8], line: &mut Vec<u8>, too_long: &mut bool) -> (usize, bool) {
    let (chunk, end) = match available.iter().position(|&b| b == b'\n') {
        Some(at) => (&available[..at], Some(at + 1)),
        None => (available, None),
    };
    if !*too_long && line.len() + chunk.len() <= MAX_LINE_BYTES {
        line.extend_from_slice(chunk);
    } else {
        *too_long = true;
        line.clear();
    }
    (end.unwrap_or(available.len()), end.is_some())
}

/// How a line that ended was read.
fn line_end(too_long: bool) -> LineRead {
    if too_long {
        LineRead::TooLong
    } else {
        LineRead::Line
    }
}

/// What `line` asks for.
fn parse(line: &[u8]) -> Line {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Skip;
    }
    match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(message) => Line::Message(Box::new(message)),
        Err(error) => match error.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                Line::Answer(error_line(&Value::Null, PARSE_ERROR, PARSE_ERROR_MESSAGE))
            }
            serde_json::error::Category::Data | serde_json::error::Category::Io => {
                let value = serde_json::from_slice::<Value>(line).unwrap_or(Value::Null);
                if unknown_notification(&value) {
                    return Line::Skip;
                }
                // The id, when the message has a usable one: the client can match
                // the answer to its request.
                let id = match value.get("id") {
                    Some(id @ (Value::Number(_) | Value::String(_))) => id.clone(),
                    _ => Value::Null,
                };
                Line::Answer(error_line(&id, INVALID_REQUEST, INVALID_REQUEST_MESSAGE))
            }
        },
    }
}

/// A notification (no `id`) whose method rmcp does not know: skipped, as rmcp's own
/// transport does, because notifications are never answered.
fn unknown_notification(value: &Value) -> bool {
    value.get("id").is_none() && value.get("method").is_some_and(Value::is_string)
}

/// One JSON-RPC error response line.
fn error_line(id: &Value, code: i64, message: &str) -> Vec<u8> {
    let mut line = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        .to_string()
        .into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> String {
        match parse(line.as_bytes()) {
            Line::Answer(bytes) => String::from_utf8(bytes).expect("utf-8"),
            other => panic!("no answer to {line:?}: {other:?}"),
        }
    }

    #[test]
    fn every_line_that_is_not_a_message_is_answered() {
        assert_eq!(
            answer("{not json"),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error: a line must be one JSON-RPC message\"}}\n"
        );
        assert_eq!(
            answer("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":12}"),
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32600,\"message\":\"Invalid Request: not a JSON-RPC 2.0 message\"}}\n"
        );
        assert_eq!(
            answer("[1,2]"),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid Request: not a JSON-RPC 2.0 message\"}}\n"
        );
        assert!(matches!(parse(b"  \r"), Line::Skip));
        // Notifications are never answered, known or not.
        for notification in [
            &b"{\"jsonrpc\":\"2.0\",\"method\":\"$/progress\",\"params\":{}}"[..],
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\",\"params\":5}",
        ] {
            assert!(!matches!(parse(notification), Line::Answer(_)));
        }
        assert!(matches!(
            parse(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r"),
            Line::Message(_)
        ));
    }

    /// The pipe's reader (a task) reads what the thread's reader does: messages in
    /// order, an answer to each line that is not one, a line over the limit read to
    /// its end and refused, a last line without `\n` dropped, then the end.
    #[tokio::test]
    async fn a_pipe_is_read_line_by_line_like_any_input() {
        use tokio::io::AsyncWriteExt;
        let (mut sender, receiver) = tokio::net::unix::pipe::pipe().expect("pipe");
        let (messages, mut incoming) = tokio::sync::mpsc::channel(READ_AHEAD);
        let (answers, answered) = mpsc::channel();
        let reader = tokio::spawn(read_pipe(receiver, messages, answers));
        let mut input = b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n{not json\n".to_vec();
        input.extend(vec![b'x'; MAX_LINE_BYTES + 1]);
        input.extend(b"\n\r\n{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\r\n{\"cut");
        let writer = tokio::spawn(async move {
            sender.write_all(&input).await.expect("write");
        });
        let mut ids = Vec::new();
        while let Some(message) = incoming.recv().await {
            ids.push(serde_json::to_value(&message).expect("a message")["id"].clone());
        }
        assert_eq!(ids, [json!(4), json!(5)]);
        writer.await.expect("writer");
        reader.await.expect("reader");
        let answers: Vec<String> = answered
            .try_iter()
            .map(|out| match out {
                Out::Line(line) => String::from_utf8(line).expect("utf-8"),
                Out::Close => panic!("the reader closes nothing"),
            })
            .collect();
        assert_eq!(
            answers,
            [
                "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error: a line must be one JSON-RPC message\"}}\n",
                "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid Request: a message line may be at most 16 MiB\"}}\n",
            ]
        );
    }

    #[test]
    fn a_line_over_the_limit_is_dropped_to_its_end() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 1];
        input.extend_from_slice(b"\nnext\ncut");
        let mut input = BufReader::with_capacity(4096, &input[..]);
        let mut line = Vec::new();
        assert_eq!(
            read_line(&mut input, &mut line).expect("read"),
            LineRead::TooLong
        );
        assert!(line.is_empty());
        assert_eq!(
            read_line(&mut input, &mut line).expect("read"),
            LineRead::Line
        );
        assert_eq!(line, b"next");
        assert_eq!(
            read_line(&mut input, &mut line).expect("read"),
            LineRead::Eof
        );
        // Exactly the limit is still a line.
        let mut input = vec![b'y'; MAX_LINE_BYTES];
        input.push(b'\n');
        let mut input = BufReader::new(&input[..]);
        assert_eq!(
            read_line(&mut input, &mut line).expect("read"),
            LineRead::Line
        );
        assert_eq!(line.len(), MAX_LINE_BYTES);
    }
}

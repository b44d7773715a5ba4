//! The stdio transport of an upstream child, bounded against what a hostile child
//! writes: rmcp's own transport ([`AsyncRwTransport`]) over a framing layer
//! ([`frame`]) that copies the child's stdout to it line by line.
//!
//! rmcp's transport alone (a) drops a line over 16 MiB and forgets it, so the call
//! it answered waits out its whole budget; (b) parses with serde's recursion limit,
//! so one tool schema nested ~62 levels deep lost the whole tool list; and (c)
//! waits forever for a line's end, so a child that writes half a line glues the
//! next answers to it and loses them. The framing layer, before rmcp sees a line:
//! - a line over [`MAX_MESSAGE_BYTES`] is not kept, but its top-level `"id"` is
//!   read as it streams by ([`scan`]), and the request it answers gets an error at
//!   once ([`OVERSIZED_CODE`]); the line itself never occupies memory;
//! - a line is read by serde for its values and depth ([`survey`]); one nested
//!   deeper than [`MAX_MESSAGE_DEPTH`] has its deeper values made `null` when it
//!   answers `tools/list` (schemas read only 32 levels anyway), and answers any
//!   other request with an error ([`TOO_DEEP_CODE`]), as does one holding more
//!   than [`MAX_MESSAGE_VALUES`] values;
//! - a line left without its end for [`UNTERMINATED_LINE`], or a line that is not
//!   JSON but holds a JSON-RPC message (an answer glued to a half line), ends the
//!   session: the supervisor marks the upstream unavailable and restarts it.
//!
//! rmcp parses and writes the messages. Closing the transport closes the child's
//! stdin, waits, then ends its process group (SIGTERM, then SIGKILL), as MCP's
//! stdio shutdown says.

mod frame;
mod scan;
mod survey;

use std::sync::PoisonError;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{ReadHalf, SimplexStream};
use tokio::process::{Child, ChildStdin};

#[cfg(doc)]
use crate::upstream::bounds::{
    MAX_MESSAGE_BYTES, MAX_MESSAGE_DEPTH, MAX_MESSAGE_VALUES, OVERSIZED_CODE, TOO_DEEP_CODE,
};
#[cfg(doc)]
use frame::UNTERMINATED_LINE;
use frame::{Listing, pump};

/// How long closing waits for the child after closing its stdin, and again after
/// SIGTERM.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

/// The most `tools/list` requests awaiting an answer that are remembered.
const MAX_LISTING: usize = 64;

/// How much of the framed stdout may wait in the pipe for rmcp to read it.
const PIPE_BYTES: usize = 64 * 1024;

/// What rmcp is handed for `line` (one line from a stdio upstream awaiting the
/// answer to `tools/list` request 1): `Ok(Some(line))`, `Ok(None)` when the line
/// is left out, `Err(())` when it ends the session. The fuzz target's entry (the
/// host's `fuzzing::upstream_line`); always built: one feature set for the
/// host's build and its tests.
#[doc(hidden)]
#[allow(clippy::result_unit_err)] // a fuzz entry: ending is all there is to say
pub fn framed(line: &[u8]) -> Result<Option<Vec<u8>>, ()> {
    let listing = Listing::default();
    listing
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert("1".to_owned());
    match frame::frame("fz", line, &listing) {
        frame::Framed::Pass(line) => Ok(Some(line.to_vec())),
        frame::Framed::Replace(line) => Ok(Some(line)),
        frame::Framed::Skip => Ok(None),
        frame::Framed::End => Err(()),
    }
}

/// A child's stdio as an rmcp transport (see the module's documentation).
pub struct ChildLines {
    rmcp: AsyncRwTransport<RoleClient, ReadHalf<SimplexStream>, ChildStdin>,
    child: Child,
    listing: Listing,
    /// The framing layer's task, copying stdout to `rmcp`.
    pump: tokio::task::JoinHandle<()>,
}

impl ChildLines {
    /// The transport of `child` (spawned with piped stdin and stdout) of upstream
    /// `upstream`. Must be called within a Tokio runtime: the framing layer is a
    /// task of its own.
    ///
    /// # Errors
    ///
    /// The child has no piped stdin or stdout.
    pub fn new(upstream: &str, mut child: Child) -> Result<Self, String> {
        let stdin = child.stdin.take().ok_or("the child has no stdin")?;
        let stdout = child.stdout.take().ok_or("the child has no stdout")?;
        let (framed, into) = tokio::io::simplex(PIPE_BYTES);
        let listing = Listing::default();
        let pump = tokio::spawn(pump(upstream.to_owned(), stdout, into, listing.clone()));
        // The framing layer passes no line over the limit; a pruned tool list can
        // come out a little longer than it went in.
        let rmcp = AsyncRwTransport::new_client(framed, stdin)
            .with_max_line_length(2 * crate::upstream::bounds::MAX_MESSAGE_BYTES);
        Ok(Self {
            rmcp,
            child,
            listing,
            pump,
        })
    }

    /// The child's process ID (its process group's).
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }
}

impl Drop for ChildLines {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

impl Transport<RoleClient> for ChildLines {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let rmcp::model::JsonRpcMessage::Request(request) = &item
            && matches!(
                request.request,
                rmcp::model::ClientRequest::ListToolsRequest(_)
            )
            && let Ok(id) = serde_json::to_string(&request.id)
        {
            let mut listing = self.listing.lock().unwrap_or_else(PoisonError::into_inner);
            if listing.len() >= MAX_LISTING {
                listing.clear();
            }
            listing.insert(id);
        }
        self.rmcp.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        self.rmcp.receive().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // rmcp's close drops the child's stdin.
        let _ = tokio::time::timeout(CLOSE_GRACE, self.rmcp.close()).await;
        let group = self.child.id();
        if tokio::time::timeout(CLOSE_GRACE, self.child.wait())
            .await
            .is_err()
        {
            if let Some(group) = group {
                crate::children::signal_group_terminate(group);
            }
            if tokio::time::timeout(CLOSE_GRACE, self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
            }
        }
        if let Some(group) = group {
            crate::children::kill_group(group);
        }
        self.pump.abort();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::scan::IdScan;
    use super::survey::Survey;

    /// Both readings of a line, the streaming scan of one too long to keep and
    /// serde's of a whole one, find its top-level ID wherever it stands, as
    /// JSON text.
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
            let mut scan = IdScan::default();
            scan.feed(line.as_bytes());
            assert_eq!(scan.id().as_deref(), id, "scanned: {line}");
            let survey =
                Survey::of(line.as_bytes()).unwrap_or_else(|error| panic!("{line}: {error}"));
            assert_eq!(survey.id.as_deref(), id, "surveyed: {line}");
        }
    }
}

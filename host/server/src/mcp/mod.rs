//! The MCP adapter: rmcp server, tool contract, error projection, and the stdio and
//! Streamable HTTP transports.
//!
//! A thin layer over [`Service`](crate::Service): each tool call is decoded, checked
//! against its input schema, handed to one service method, and the outcome rendered
//! as `structuredContent` plus a JSON text mirror, or as a fixed error text with
//! `isError`.

mod approval;
mod contract;
pub mod http;
mod listener;
mod progress;
mod replica;
mod server;
mod sessions;
mod stdio;
mod tasks;

pub use approval::{
    APPROVE_FIELD, ARGUMENTS_CUT, ASKED_ELSEWHERE, ApprovalKey, DEFAULT_APPROVAL_TIMEOUT,
    FOR_EXECUTION_FIELD, INPUT_KEY, KEY_FILE, KeyError, USED_ALREADY, load_key,
};
pub use contract::{
    DESCRIBE_API, DESCRIBE_API_DESCRIPTION, EXECUTE, EXECUTE_DESCRIPTION, INSTRUCTIONS,
    LANGUAGE_SURFACE, SEARCH_API, SEARCH_API_DESCRIPTION,
};
pub use server::{
    ClientHook, META_ERROR, META_STATS, McpServer, ServeError, SubjectSource, serve_stdio,
};
pub use sessions::{
    ANSWERS_CHANNEL, MAX_SESSIONS, MAX_SESSIONS_PER_SUBJECT, MAX_STREAMS, SESSION_HEADER,
    SESSIONS_UNAVAILABLE, STREAM_OPEN, TOO_MANY_SESSIONS,
};

//! Asking the human behind an MCP client whether a call may run: the
//! [`Approver`] of an execution whose policy says `{"ask": "<question>"}`.
//!
//! A client on 2025-06-18 or 2025-11-25 that declared form elicitation is sent
//! `elicitation/create` within its `tools/call`: the policy's question, the
//! capability and its arguments, and a yes/no form (with "for the rest of this
//! execution"). Clients that cannot be asked this way get an approver that
//! says why, and their calls are denied.
//!
//! A 2026-07-28 client (over stdio or HTTP) that declared elicitation is asked
//! with a multi round-trip `input_required` result instead: the execution
//! stops at the call ([`crate::execute::Suspended`]); the answer carries the
//! question as an `inputRequests` elicitation and the record of the calls made
//! so far in `requestState`, signed with the approval key (HMAC-SHA256, rmcp's
//! [`RequestStateCodec`]) for this subject and this program, expiring after
//! `--approval-timeout`, at most `--max-value-bytes`. The client retries the
//! request with the human's answer; any replica holding the key re-runs the
//! program, replaying the recorded calls. An altered, expired or other
//! subject's state is `permission denied`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    BooleanSchema, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    ProtocolVersion, RequestStateCodec, SealOptions,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{Peer, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;

use crate::execute::{
    Answer, ApprovalRequest, Approver, Asking, PendingCall, Recorded, Replay, Suspended,
};

/// The default `--approval-timeout`: how long a human may take to answer.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// The form's field that approves the call (required).
pub const APPROVE_FIELD: &str = "approve";
/// The form's field that approves the capability for the rest of the
/// execution (optional, `false` by default).
pub const FOR_EXECUTION_FIELD: &str = "approve_for_this_execution";
/// The title of [`APPROVE_FIELD`].
const APPROVE_TITLE: &str = "Approve this call";
/// The title of [`FOR_EXECUTION_FIELD`].
const FOR_EXECUTION_TITLE: &str = "Approve every call of this capability until the program ends";

/// Why a client over Streamable HTTP is not asked: the server is stateless,
/// and the client's answer to a request it sent would reach any replica.
pub const NOT_OVER_HTTP: &str = "asking over Streamable HTTP is not supported yet (stdio only)";
/// The key of the question in `inputRequests`, and of the answer in
/// `inputResponses`.
pub const INPUT_KEY: &str = "approval";
/// Why a 2026-07-28 client is not asked when the server has no approval key.
pub const NO_KEY: &str = "the server has no approval key to sign requestState";
/// Why a call is denied whose record does not fit in `requestState`.
pub const STATE_TOO_LARGE: &str =
    "the calls before the approval do not fit in requestState (--max-value-bytes)";
/// Why a retry that carried no answer is denied.
pub const NO_ANSWER: &str = "the retry carried no answer to the approval";
/// Why a client that declared no form elicitation is not asked.
pub const NO_ELICITATION: &str = "the client did not declare form elicitation";
/// Why a task's call is not asked.
pub const NOT_IN_TASKS: &str = "a call in a task cannot ask a human yet";

/// Most bytes of a failed elicitation's reason in the log.
const MAX_REASON_BYTES: usize = 256;

/// The text the human reads: the policy's question, then the call.
pub fn message(request: &ApprovalRequest) -> String {
    format!(
        "{}\n\nCapability: {}\nArguments: {}",
        request.question, request.capability, request.arguments
    )
}

/// The form the human fills in.
pub fn form() -> ElicitationSchema {
    let schema = ElicitationSchema::builder()
        .required_bool_with(APPROVE_FIELD, |b: BooleanSchema| b.title(APPROVE_TITLE))
        .optional_bool_with(FOR_EXECUTION_FIELD, |b: BooleanSchema| {
            b.title(FOR_EXECUTION_TITLE).with_default(false)
        })
        .build();
    match schema {
        Ok(schema) => schema,
        // Two boolean fields always build.
        Err(_) => ElicitationSchema::builder().build_unchecked(),
    }
}

/// What the human's answer means: accepted with `approve: true` approves
/// (for the rest of the execution too with the second field true); anything
/// else declines.
pub fn answer(result: &ElicitResult) -> Answer {
    let field = |name: &str| {
        result
            .content
            .as_ref()
            .and_then(|content| content.get(name))
            .and_then(Value::as_bool)
    };
    match result.action {
        ElicitationAction::Accept => match (field(APPROVE_FIELD), field(FOR_EXECUTION_FIELD)) {
            (Some(true), Some(true)) => Answer::ApprovedForExecution,
            (Some(true), _) => Answer::Approved,
            (Some(false) | None, _) => Answer::Declined,
        },
        // Declined, cancelled, or an action a later revision adds: not a yes.
        _ => Answer::Declined,
    }
}

/// Asks through elicitation, or says why it cannot.
struct Asker {
    how: How,
    timeout: Duration,
}

enum How {
    Elicit(Peer<RoleServer>),
    /// Ends the execution with `input_required` (2026-07-28).
    Suspend,
    Cannot(&'static str),
}

impl Approver for Asker {
    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn suspends(&self) -> bool {
        matches!(self.how, How::Suspend)
    }

    fn ask(&self, request: ApprovalRequest) -> Asking {
        let peer = match &self.how {
            How::Elicit(peer) => peer.clone(),
            // Never asked: the dispatcher suspends instead.
            How::Suspend => return Box::pin(async { Answer::Declined }),
            How::Cannot(reason) => {
                let reason = (*reason).to_owned();
                return Box::pin(async move { Answer::NotAsked(reason) });
            }
        };
        let timeout = self.timeout;
        Box::pin(async move {
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: message(&request),
                requested_schema: form(),
            };
            // At the timeout rmcp withdraws the question (notifications/cancelled).
            match peer
                .create_elicitation_with_timeout(params, Some(timeout))
                .await
            {
                Ok(result) => answer(&result),
                Err(rmcp::service::ServiceError::Timeout { .. }) => Answer::TimedOut,
                Err(error) => {
                    // The client's error text, cut: it is the client's to choose.
                    let mut reason = format!("the elicitation failed: {error}");
                    if reason.len() > MAX_REASON_BYTES {
                        let mut end = MAX_REASON_BYTES;
                        while !reason.is_char_boundary(end) {
                            end -= 1;
                        }
                        reason.truncate(end);
                        reason.push('…');
                    }
                    Answer::NotAsked(reason)
                }
            }
        })
    }
}

/// The approver of a `tools/call execute` arriving in `context`: a 2026-07-28
/// client that declared elicitation is asked by `input_required` (over stdio
/// or HTTP); an older one over stdio that declared form elicitation by
/// `elicitation/create`; any other gets one that says why not.
pub fn approver(
    context: &RequestContext<RoleServer>,
    over_http: bool,
    keyed: bool,
    timeout: Duration,
) -> Arc<dyn Approver> {
    let how = if is_2026(context) {
        match context.client_capabilities() {
            Some(_) if !keyed => How::Cannot(NO_KEY),
            Some(capabilities) if capabilities.elicitation.is_some() => How::Suspend,
            Some(_) | None => How::Cannot(NO_ELICITATION),
        }
    } else if over_http {
        How::Cannot(NOT_OVER_HTTP)
    } else if !context
        .peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        How::Cannot(NO_ELICITATION)
    } else {
        How::Elicit(context.peer.clone())
    };
    Arc::new(Asker { how, timeout })
}

/// Whether the request is on 2026-07-28 or later (asked by `input_required`).
pub fn is_2026(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// What `requestState` carries, signed: the calls made before the question,
/// the call asked about, and the capabilities approved for the execution.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    v: u8,
    calls: Vec<Recorded>,
    pending: PendingCall,
    for_execution: Vec<String>,
}

/// What a state is bound to: the subject and the program (so it opens for
/// neither another subject nor another program).
fn context_of(subject: &str, source: &str) -> Vec<u8> {
    let program = hex::encode(sha2::Sha256::digest(source.as_bytes()));
    format!("codemode-approval\0{subject}\0{program}").into_bytes()
}

/// The `input_required` answer of an execution that stopped to ask: the
/// question as an elicitation, the record in a signed `requestState` expiring
/// after `timeout`. `Err` with the reason when the state would be over
/// `max_bytes`.
pub fn input_required(
    codec: &RequestStateCodec,
    subject: &str,
    source: &str,
    suspended: Suspended,
    timeout: Duration,
    max_bytes: usize,
) -> Result<InputRequiredResult, &'static str> {
    let state = State {
        v: 1,
        calls: suspended.calls,
        pending: suspended.pending,
        for_execution: suspended.for_execution,
    };
    let bound = context_of(subject, source);
    let options = SealOptions::new().associated_data(&bound).ttl(timeout);
    let sealed = codec
        .seal_json_with(&state, &options)
        .map_err(|_| STATE_TOO_LARGE)?;
    if sealed.len() > max_bytes {
        return Err(STATE_TOO_LARGE);
    }
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(&suspended.request),
        requested_schema: form(),
    };
    let mut requests = InputRequests::new();
    requests.insert(
        INPUT_KEY.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(params)),
    );
    Ok(InputRequiredResult::new(Some(requests), Some(sealed)))
}

/// The replay a retry asks for: its `requestState` opened for this subject
/// and program, its answer read from `inputResponses`. `Err` with the reason
/// (logged; the client reads `permission denied`) when the state was altered,
/// made for another subject or program, expired, or is over `max_bytes`.
pub fn replay(
    codec: &RequestStateCodec,
    subject: &str,
    source: &str,
    sealed: &str,
    responses: Option<&InputResponses>,
    max_bytes: usize,
) -> Result<Replay, String> {
    if sealed.len() > max_bytes {
        return Err(format!(
            "requestState is over {max_bytes} bytes (--max-value-bytes)"
        ));
    }
    let state: State = codec
        .open_json_with(sealed, &context_of(subject, source))
        .map_err(|error| error.to_string())?;
    if state.v != 1 {
        return Err(format!(
            "requestState version {} is not this server's",
            state.v
        ));
    }
    let answer = match responses.and_then(|responses| responses.get(INPUT_KEY)) {
        Some(response) => match serde_json::from_value::<ElicitResult>(response.clone()) {
            Ok(result) => self::answer(&result),
            Err(_) => Answer::Declined,
        },
        None => Answer::NotAsked(NO_ANSWER.to_owned()),
    };
    Ok(Replay {
        calls: state.calls,
        pending: state.pending,
        answer,
        for_execution: state.for_execution,
    })
}

/// The file in the cache folder holding the approval key when
/// `--approval-key` names none.
pub const KEY_FILE: &str = "approval.key";
/// Most bytes of an approval key file.
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// Why the approval key could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The file could not be read.
    #[error("cannot read the approval key {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: crate::files::FileError,
    },
    /// It holds fewer than 32 bytes (after trimming).
    #[error("the approval key {path} is {len} bytes; it needs at least {MIN} (e.g. `openssl rand -hex 32`)", MIN = RequestStateCodec::MIN_KEY_LENGTH)]
    Short {
        /// The file.
        path: String,
        /// Its length.
        len: usize,
    },
}

/// The codec that signs and opens `requestState`, with the key of `given`
/// (`--approval-key`), else of [`KEY_FILE`] in `cache_dir`, made there (32
/// random bytes, in hex, readable by the owner only) when absent. Replicas that
/// share the file open each other's states. Where no file can be had (no
/// cache folder, or a read-only one), a key of this process is drawn and a WARN
/// says that replicas will not open each other's states.
///
/// # Errors
///
/// [`KeyError`] when the named file, or the cache folder's, cannot be read or
/// is too short.
pub fn load_key(
    given: Option<&std::path::Path>,
    cache_dir: Option<&std::path::Path>,
) -> Result<RequestStateCodec, KeyError> {
    let read = |path: &std::path::Path| {
        let text = crate::files::read_text(path, MAX_KEY_FILE_BYTES, "--approval-key").map_err(
            |reason| KeyError::Read {
                path: path.display().to_string(),
                reason,
            },
        )?;
        let key = text.trim().as_bytes().to_vec();
        if key.len() < RequestStateCodec::MIN_KEY_LENGTH {
            return Err(KeyError::Short {
                path: path.display().to_string(),
                len: key.len(),
            });
        }
        Ok(RequestStateCodec::new_unchecked(key))
    };
    if let Some(path) = given {
        return read(path);
    }
    let drawn = || {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).ok()?;
        Some(hex::encode(bytes))
    };
    let Some(dir) = cache_dir else {
        tracing::warn!(
            "no cache folder for the approval key: a key of this process signs approvals, which other replicas cannot open (pass --approval-key)"
        );
        return Ok(RequestStateCodec::new_unchecked(
            drawn().unwrap_or_default(),
        ));
    };
    let path = dir.join(KEY_FILE);
    match read(&path) {
        Ok(codec) => return Ok(codec),
        Err(KeyError::Read {
            reason: crate::files::FileError::Io(error),
            ..
        }) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let key = drawn().unwrap_or_default();
    match write_new(&path, &key) {
        Ok(()) => {
            tracing::info!(file = %path.display(), "made an approval key: replicas share approvals when they share this file (or --approval-key)");
            Ok(RequestStateCodec::new_unchecked(key))
        }
        // Another process made it first: use that one.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => read(&path),
        Err(error) => {
            tracing::warn!(file = %path.display(), reason = %error, "cannot write the approval key: a key of this process signs approvals, which other replicas cannot open (pass --approval-key)");
            Ok(RequestStateCodec::new_unchecked(key))
        }
    }
}

/// Writes `key` to a new file at `path`, readable by its owner only.
fn write_new(path: &std::path::Path, key: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(key.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// The approver of a task's execution: nobody can be asked yet.
pub fn for_task(timeout: Duration) -> Arc<dyn Approver> {
    Arc::new(Asker {
        how: How::Cannot(NOT_IN_TASKS),
        timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_human_reads_the_question_and_the_call() {
        let request = ApprovalRequest {
            question: "Commit to the repository?".to_owned(),
            capability: "git.git_commit".to_owned(),
            arguments: r#"{"message":"fix"}"#.to_owned(),
        };
        assert_eq!(
            message(&request),
            "Commit to the repository?\n\nCapability: git.git_commit\nArguments: {\"message\":\"fix\"}"
        );
        assert_eq!(
            serde_json::to_value(form()).unwrap(),
            json!({
                "type": "object",
                "properties": {
                    "approve": {"type": "boolean", "title": "Approve this call"},
                    "approve_for_this_execution": {
                        "type": "boolean",
                        "title": "Approve every call of this capability until the program ends",
                        "default": false
                    }
                },
                "required": ["approve"]
            })
        );
    }

    #[test]
    fn only_an_accepted_yes_approves() {
        let accepted = |content: Value| {
            let mut result = ElicitResult::new(ElicitationAction::Accept);
            result.content = Some(content);
            answer(&result)
        };
        assert_eq!(accepted(json!({"approve": true})), Answer::Approved);
        assert_eq!(
            accepted(json!({"approve": true, "approve_for_this_execution": true})),
            Answer::ApprovedForExecution
        );
        assert_eq!(
            accepted(json!({"approve": true, "approve_for_this_execution": false})),
            Answer::Approved
        );
        assert_eq!(accepted(json!({"approve": false})), Answer::Declined);
        assert_eq!(accepted(json!({"approve": "yes"})), Answer::Declined);
        assert_eq!(accepted(json!({})), Answer::Declined);
        for action in [ElicitationAction::Decline, ElicitationAction::Cancel] {
            assert_eq!(answer(&ElicitResult::new(action)), Answer::Declined);
        }
    }
}

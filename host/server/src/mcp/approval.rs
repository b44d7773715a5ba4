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
//!
//! An execution that runs as a task (2026-07-28, the Tasks extension) asks
//! through the task instead, when the `tools/call` that made it declared form
//! elicitation: the task turns `input_required`, `tasks/get` shows the question
//! in `inputRequests` (under a key new for each question, `approval-1`,
//! `approval-2`, ...), and the answer comes with `tasks/update`, on any replica
//! sharing the task store. The execution waits where it is, so nothing is
//! replayed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use rmcp::model::{
    BooleanSchema, ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, InputRequest, InputRequests, InputRequiredResult,
    InputResponses, ProtocolVersion, RequestId, RequestStateCodec, SealOptions, ServerRequest,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{Peer, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;

use crate::execute::{
    Answer, ApprovalRequest, Approver, Asking, PendingCall, Recorded, Replay, Suspended,
    WITHDRAW_GRACE,
};
use crate::tasks::TaskStore;

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

/// Why a client before 2026-07-28 over Streamable HTTP is not asked without
/// `--http-sessions`: the server is stateless, and the client's answer to a
/// request it sent would reach any replica.
pub const NOT_OVER_HTTP: &str =
    "a client before 2026-07-28 over Streamable HTTP is asked only with --http-sessions";
/// The key of the question in `inputRequests`, and of the answer in
/// `inputResponses`.
pub const INPUT_KEY: &str = "approval";
/// Why a 2026-07-28 client is not asked when the server has no approval key.
pub const NO_KEY: &str = "the server has no approval key to sign requestState";
/// Why a call is denied when no random state token could be drawn.
const NO_RANDOM: &str = "no random bytes for the requestState";
/// Why a retry is denied whose state was answered before.
pub const USED_ALREADY: &str = "requestState was answered already: a state is answered once";
/// Why a retry's state sealed by a server whose single-use claims this one
/// cannot see (another process's memory, another file) is refused: it cannot
/// know whether the state was answered there (issue 49, F2: a restart forgot
/// the claims and ran a spent approval again).
pub const ASKED_ELSEWHERE: &str = "requestState was sealed by another server process, whose answers this one cannot see: a state is answered only where its answers are kept (--store: one process's memory, one file, or one Redis)";
/// Why a call is denied whose record does not fit in `requestState`.
pub const STATE_TOO_LARGE: &str =
    "the calls before the approval do not fit in requestState (--max-value-bytes)";
/// Why a retry that carried no answer is denied.
pub const NO_ANSWER: &str = "the retry carried no answer to the approval";
/// Why a client that declared no form elicitation is not asked.
pub const NO_ELICITATION: &str = "the client did not declare form elicitation";
/// Why a task's call is not asked when the task store does not answer.
pub const TASK_STORE_UNAVAILABLE: &str = "the task store is unavailable to ask through the task";
/// Why a task's call is not asked once the task ended (it was cancelled).
pub const TASK_ENDED: &str = "the task ended before its question was answered";

/// Most bytes of a failed elicitation's reason in the log.
const MAX_REASON_BYTES: usize = 256;

/// What the human reads under arguments whose strings were cut to fit.
pub const ARGUMENTS_CUT: &str =
    "Strings ending in …[cut] are longer than shown; approving runs the call with them whole.";

/// The text the human reads: the policy's question, then the call (and, when
/// strings of its arguments were cut to fit, [`ARGUMENTS_CUT`]).
pub fn message(request: &ApprovalRequest) -> String {
    let mut text = format!(
        "{}\n\nCapability: {}\nArguments: {}",
        request.question, request.capability, request.arguments
    );
    if request.cut {
        text.push_str("\n\n");
        text.push_str(ARGUMENTS_CUT);
    }
    text
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
    /// `elicitation/create`, sent on the stream of the request it is for.
    Elicit(Peer<RoleServer>, RequestId),
    /// Ends the execution with `input_required` (2026-07-28).
    Suspend,
    /// Through the task the execution runs as.
    Task(Arc<TaskAsker>),
    Cannot(&'static str),
}

/// Asks through a task: its `inputRequests` and `tasks/update`.
struct TaskAsker {
    store: Arc<TaskStore>,
    id: String,
    /// The server's runtime, where the store is reached (the dispatcher polls
    /// the question on the execution's thread).
    runtime: tokio::runtime::Handle,
    /// How many questions it asked: each gets a key of its own.
    asked: AtomicU64,
}

impl TaskAsker {
    /// Shows `requests` (with one question, under `key`) in the task and waits
    /// until `asked` + `timeout` for the answer; the task works again when it
    /// ends, answered or not.
    async fn wait(
        &self,
        key: String,
        requests: String,
        asked: tokio::time::Instant,
        timeout: Duration,
    ) -> Answer {
        // Made first: a wait given up on while the store is asked leaves no
        // question behind.
        let _resume = Resume {
            store: &self.store,
            id: &self.id,
            key: &key,
            asked,
        };
        let answer = match self
            .store
            .ask(
                &self.id,
                &key,
                Arc::from(requests),
                timeout + WITHDRAW_GRACE,
            )
            .await
        {
            Ok(answer) => answer,
            Err(_) => return Answer::NotAsked(TASK_STORE_UNAVAILABLE.to_owned()),
        };
        match tokio::time::timeout_at(asked + timeout, answer).await {
            Ok(Ok(response)) => match serde_json::from_value::<ElicitResult>(response) {
                Ok(result) => self::answer(&result),
                Err(_) => Answer::Declined,
            },
            Ok(Err(_)) => {
                // The task ended: cancelled, most likely, and the execution
                // is told so within the grace; let that be its outcome.
                tokio::time::sleep(WITHDRAW_GRACE / 2).await;
                Answer::NotAsked(TASK_ENDED.to_owned())
            }
            Err(_) => Answer::TimedOut,
        }
    }
}

/// Sets a task working again when its wait, begun at `asked`, ends, however
/// it ends.
struct Resume<'a> {
    store: &'a TaskStore,
    id: &'a str,
    key: &'a str,
    asked: tokio::time::Instant,
}

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.store.resume(self.id, self.key, self.asked.elapsed());
    }
}

/// Aborts a spawned wait when the dispatcher gives up on it.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Approver for Asker {
    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn suspends(&self) -> bool {
        matches!(self.how, How::Suspend)
    }

    fn ask(&self, request: ApprovalRequest) -> Asking {
        let (peer, originating) = match &self.how {
            How::Elicit(peer, id) => (peer.clone(), id.clone()),
            // Never asked: the dispatcher suspends instead.
            How::Suspend => return Box::pin(async { Answer::Declined }),
            How::Task(task) => return ask_in_task(task.clone(), request, self.timeout),
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
            match elicit(&peer, originating, params, timeout).await {
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

/// Asks `request` through the task `task` runs as, on the server's runtime.
fn ask_in_task(task: Arc<TaskAsker>, request: ApprovalRequest, timeout: Duration) -> Asking {
    let number = task.asked.fetch_add(1, Ordering::Relaxed) + 1;
    let key = format!("{INPUT_KEY}-{number}");
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(&request),
        requested_schema: form(),
    };
    let mut requests = InputRequests::new();
    requests.insert(
        key.clone(),
        InputRequest::Elicitation(ElicitRequest::new(params)),
    );
    let Ok(requests) = serde_json::to_string(&requests) else {
        return Box::pin(async {
            Answer::NotAsked("the question could not be encoded".to_owned())
        });
    };
    // The dispatcher's deadline counts from now, not from when the task store
    // was reached.
    let asked = tokio::time::Instant::now();
    let runtime = task.runtime.clone();
    let waiting = runtime.spawn(async move { task.wait(key, requests, asked, timeout).await });
    let abort = AbortOnDrop(waiting.abort_handle());
    Box::pin(async move {
        let _abort = abort;
        waiting
            .await
            .unwrap_or_else(|_| Answer::NotAsked(TASK_ENDED.to_owned()))
    })
}

/// What of a `tasks/update`'s `inputResponses` reaches the task store: the
/// responses under this server's question keys (`approval-N`, at most
/// [`MAX_RESPONSES`](crate::tasks::MAX_RESPONSES) of them), each reduced to
/// what it answers (the action and the two fields), so that a client's
/// response is never stored as it came.
pub fn task_responses(responses: &InputResponses) -> serde_json::Map<String, Value> {
    responses
        .iter()
        .filter(|(key, _)| is_question_key(key))
        .take(crate::tasks::MAX_RESPONSES)
        .map(|(key, response)| {
            let answer = match serde_json::from_value::<ElicitResult>(response.clone()) {
                Ok(result) => answer(&result),
                Err(_) => Answer::Declined,
            };
            (key.clone(), answered(&answer))
        })
        .collect()
}

/// Whether `key` is one [`ask_in_task`] gives a question: `approval-` and a
/// number.
fn is_question_key(key: &str) -> bool {
    key.strip_prefix(INPUT_KEY)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|number| {
            !number.is_empty() && number.len() <= 20 && number.bytes().all(|b| b.is_ascii_digit())
        })
}

/// The elicitation result that stands for `answer`: what [`answer`] reads back
/// as the same.
fn answered(answer: &Answer) -> Value {
    match answer {
        Answer::Approved => {
            serde_json::json!({"action": "accept", "content": {APPROVE_FIELD: true}})
        }
        Answer::ApprovedForExecution => serde_json::json!({
            "action": "accept",
            "content": {APPROVE_FIELD: true, FOR_EXECUTION_FIELD: true},
        }),
        Answer::Declined | Answer::TimedOut | Answer::NotAsked(_) => {
            serde_json::json!({"action": "decline"})
        }
    }
}

/// Sends `params` as `elicitation/create` and waits at most `timeout` for the
/// answer (then rmcp withdraws the question with `notifications/cancelled`).
/// The request is marked as `originating`'s, so that over HTTP with sessions
/// it rides that `tools/call`'s response stream: the call waits on a thread
/// of its own, outside the task whose mark rmcp would read.
async fn elicit(
    peer: &Peer<RoleServer>,
    originating: RequestId,
    params: ElicitRequestParams,
    timeout: Duration,
) -> Result<ElicitResult, rmcp::service::ServiceError> {
    let mut request = ElicitRequest::new(params);
    request
        .extensions
        .insert(rmcp::service::OriginatingRequestId(originating));
    let options = rmcp::service::PeerRequestOptions::with_timeout(timeout);
    let result = peer
        .send_request_with_option(ServerRequest::ElicitRequest(request), options)
        .await?
        .await_response()
        .await?;
    match result {
        ClientResult::ElicitResult(result) => Ok(result),
        _ => Err(rmcp::service::ServiceError::UnexpectedResponse),
    }
}

/// The approver of a `tools/call execute` arriving in `context`: a 2026-07-28
/// client that declared elicitation is asked by `input_required` (over stdio
/// or HTTP); an older one that declared form elicitation by
/// `elicitation/create` (over stdio, or HTTP with sessions); any other gets
/// one that says why not.
pub fn approver(
    context: &RequestContext<RoleServer>,
    stateless: bool,
    keyed: bool,
    timeout: Duration,
) -> Arc<dyn Approver> {
    let how = if is_2026(context) {
        match (keyed, declares_form(context)) {
            (false, _) => How::Cannot(NO_KEY),
            (true, true) => How::Suspend,
            (true, false) => How::Cannot(NO_ELICITATION),
        }
    } else if stateless {
        How::Cannot(NOT_OVER_HTTP)
    } else if !context
        .peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        How::Cannot(NO_ELICITATION)
    } else {
        How::Elicit(context.peer.clone(), context.id.clone())
    };
    Arc::new(Asker { how, timeout })
}

/// Whether a 2026-07-28 request declared form elicitation: with `form`, or
/// with neither mode.
fn declares_form(context: &RequestContext<RoleServer>) -> bool {
    context.client_capabilities().is_some_and(|capabilities| {
        capabilities
            .elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none())
    })
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
    /// 128 random bits: a state is answered once ([`Replayed::once`]).
    once: String,
    calls: Vec<Recorded>,
    pending: PendingCall,
    for_execution: Vec<String>,
    /// When it expires, in milliseconds since the Unix epoch: as long as its
    /// single use is remembered, whichever replica (whatever its
    /// `--approval-timeout`) answers it. 0 in states sealed before it was kept.
    #[serde(default)]
    expires_ms: u64,
    /// The board whose memory alone remembers its single use
    /// ([`TaskStore::claims_here`](crate::tasks::TaskStore::claims_here)): only
    /// a server with that board opens it. Empty when sealed by a server whose
    /// claims replicas share.
    #[serde(default)]
    claims: String,
}

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// The key of approvals' `requestState`: it encrypts what the state carries
/// (the earlier calls' results are not the client's to read; XChaCha20-Poly1305
/// under a key derived from it) and signs it with its expiry (rmcp's
/// [`RequestStateCodec`], HMAC-SHA256), both bound to the subject and the
/// program.
pub struct ApprovalKey {
    codec: RequestStateCodec,
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for ApprovalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalKey")
    }
}

impl ApprovalKey {
    /// The key of `secret` (at least 32 bytes).
    fn new(secret: &[u8]) -> Option<Self> {
        let codec = RequestStateCodec::try_new(secret.to_vec()).ok()?;
        let mut derive = sha2::Sha256::new();
        derive.update(b"codemode-approval/encrypt/v1\0");
        derive.update(secret);
        let cipher = XChaCha20Poly1305::new_from_slice(derive.finalize().as_slice()).ok()?;
        Some(Self { codec, cipher })
    }

    /// `state` encrypted and signed for `bound`, expiring after `ttl`.
    fn seal(&self, state: &State, bound: &[u8], ttl: Duration) -> Option<String> {
        let json = serde_json::to_vec(state).ok()?;
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).ok()?;
        let sealed = self
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: &json,
                    aad: bound,
                },
            )
            .ok()?;
        let mut payload = nonce.to_vec();
        payload.extend_from_slice(&sealed);
        let options = SealOptions::new().associated_data(bound).ttl(ttl);
        Some(self.codec.seal_with(&payload, &options))
    }

    /// The state `sealed` carries, if it was sealed by this key for `bound`
    /// and has not expired; else why not.
    fn open(&self, sealed: &str, bound: &[u8]) -> Result<State, String> {
        let payload = self
            .codec
            .open_with(sealed, bound)
            .map_err(|error| error.to_string())?;
        let (nonce, encrypted) = payload
            .split_at_checked(24)
            .ok_or_else(|| "request state is too short".to_owned())?;
        let nonce: [u8; 24] = nonce
            .try_into()
            .map_err(|_| "request state is too short".to_owned())?;
        let json = self
            .cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: encrypted,
                    aad: bound,
                },
            )
            .map_err(|_| "request state does not decrypt".to_owned())?;
        serde_json::from_slice(&json).map_err(|_| "request state is not this server's".to_owned())
    }
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
    key: &ApprovalKey,
    subject: &str,
    source: &str,
    suspended: Suspended,
    timeout: Duration,
    max_bytes: usize,
    claims_here: Option<&str>,
) -> Result<InputRequiredResult, &'static str> {
    let mut once = [0u8; 16];
    getrandom::fill(&mut once).map_err(|_| NO_RANDOM)?;
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let state = State {
        v: 1,
        once: hex::encode(once),
        calls: suspended.calls,
        pending: suspended.pending,
        for_execution: suspended.for_execution,
        expires_ms: now_ms().saturating_add(timeout_ms),
        claims: claims_here.unwrap_or_default().to_owned(),
    };
    let bound = context_of(subject, source);
    let sealed = key.seal(&state, &bound, timeout).ok_or(NO_RANDOM)?;
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

/// A retry's opened state: the replay to run, once its token is claimed.
pub struct Replayed {
    /// What the program replays.
    pub replay: Replay,
    /// The state's single-use token: a state is answered once (claimed in the
    /// task store, which replicas share with `--task-store`).
    pub once: String,
    /// How long the state stays valid from now (`None`: a state that does not
    /// say): its claim must be remembered that long at least.
    pub valid_for: Option<Duration>,
}

/// The replay a retry asks for: its `requestState` opened for this subject
/// and program, its answer read from `inputResponses`. `Err` with the reason
/// (logged; the client reads `permission denied`) when the state was altered,
/// made for another subject or program, expired, or is over `max_bytes`.
pub fn replay(
    key: &ApprovalKey,
    subject: &str,
    source: &str,
    sealed: &str,
    responses: Option<&InputResponses>,
    max_bytes: usize,
    claims_here: Option<&str>,
) -> Result<Replayed, String> {
    if sealed.len() > max_bytes {
        return Err(format!(
            "requestState is over {max_bytes} bytes (--max-value-bytes)"
        ));
    }
    let state = key.open(sealed, &context_of(subject, source))?;
    if state.v != 1 {
        return Err(format!(
            "requestState version {} is not this server's",
            state.v
        ));
    }
    if let Some(here) = claims_here
        && state.claims != here
    {
        return Err(ASKED_ELSEWHERE.to_owned());
    }
    let answer = match responses.and_then(|responses| responses.get(INPUT_KEY)) {
        Some(response) => match serde_json::from_value::<ElicitResult>(response.clone()) {
            Ok(result) => self::answer(&result),
            Err(_) => Answer::Declined,
        },
        None => Answer::NotAsked(NO_ANSWER.to_owned()),
    };
    Ok(Replayed {
        replay: Replay {
            calls: state.calls,
            pending: state.pending,
            answer,
            for_execution: state.for_execution,
        },
        once: state.once,
        valid_for: (state.expires_ms != 0)
            .then(|| Duration::from_millis(state.expires_ms.saturating_sub(now_ms()))),
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
        reason: String,
    },
    /// No random key could be drawn.
    #[error("no random bytes for an approval key")]
    Random,
    /// It holds fewer than 32 bytes (after trimming).
    #[error("the approval key {path} is {len} bytes; it needs at least {MIN} (e.g. `openssl rand -hex 32`)", MIN = RequestStateCodec::MIN_KEY_LENGTH)]
    Short {
        /// The file.
        path: String,
        /// Its length.
        len: usize,
    },
}

/// The key that seals `requestState`: the file `given` (`--approval-key`: at
/// least 32 bytes after trimming, e.g. `openssl rand -hex 32`), else
/// [`KEY_FILE`] in `cache_dir` (32 random bytes, made when absent, private to
/// this user like the cache's own key). Replicas that share the file open each
/// other's states. Where no file can be had (no cache folder, or a read-only
/// one), a key of this process is drawn and a WARN says that other replicas,
/// and this one after a restart, will not open its states.
///
/// # Errors
///
/// [`KeyError`] when the named file cannot be read or is too short, or no
/// random key can be drawn.
pub fn load_key(
    given: Option<&std::path::Path>,
    cache_dir: Option<&std::path::Path>,
) -> Result<ApprovalKey, KeyError> {
    if let Some(path) = given {
        let text = crate::files::read_text(path, MAX_KEY_FILE_BYTES, "--approval-key").map_err(
            |reason| KeyError::Read {
                path: path.display().to_string(),
                reason: reason.to_string(),
            },
        )?;
        let secret = text.trim().as_bytes();
        return ApprovalKey::new(secret).ok_or_else(|| KeyError::Short {
            path: path.display().to_string(),
            len: secret.len(),
        });
    }
    let made = cache_dir.map(|dir| {
        crate::cache::private_key(dir, KEY_FILE, "the approval key")
            .map_err(|error| (dir.join(KEY_FILE), error))
    });
    let secret = match made {
        Some(Ok(secret)) => secret,
        Some(Err((path, error))) => {
            tracing::warn!(file = %path.display(), reason = %error, "no approval key file: a key of this process signs approvals, which other replicas (and this one after a restart) cannot open; pass --approval-key");
            drawn()?
        }
        None => {
            tracing::warn!(
                "no cache folder for the approval key: a key of this process signs approvals, which other replicas (and this one after a restart) cannot open; pass --approval-key"
            );
            drawn()?
        }
    };
    ApprovalKey::new(&secret).ok_or(KeyError::Random)
}

/// 32 random bytes.
fn drawn() -> Result<[u8; 32], KeyError> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|_| KeyError::Random)?;
    Ok(secret)
}

/// The approver of the execution task `id` in `store` runs: asked through
/// the task when the `tools/call` in `context` that made it declared form
/// elicitation, else one that says why not. Called on the server's runtime.
pub fn for_task(
    context: &RequestContext<RoleServer>,
    store: Arc<TaskStore>,
    id: String,
    timeout: Duration,
) -> Arc<dyn Approver> {
    let how = if declares_form(context) {
        How::Task(Arc::new(TaskAsker {
            store,
            id,
            runtime: tokio::runtime::Handle::current(),
            asked: AtomicU64::new(0),
        }))
    } else {
        How::Cannot(NO_ELICITATION)
    };
    Arc::new(Asker { how, timeout })
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
            cut: false,
        };
        assert_eq!(
            message(&request),
            "Commit to the repository?\n\nCapability: git.git_commit\nArguments: {\"message\":\"fix\"}"
        );
        // Arguments cut to fit: the human is told they run whole (issue 49, F6).
        let cut = ApprovalRequest {
            arguments: r#"{"command":"ls…[cut]"}"#.to_owned(),
            cut: true,
            ..request.clone()
        };
        assert_eq!(
            message(&cut),
            "Commit to the repository?\n\nCapability: git.git_commit\nArguments: {\"command\":\"ls…[cut]\"}\n\nStrings ending in …[cut] are longer than shown; approving runs the call with them whole."
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

    fn state(once: &str) -> State {
        State {
            v: 1,
            once: once.to_owned(),
            calls: vec![Recorded {
                id: "mcp:double/count".to_owned(),
                digest: "d".to_owned(),
                result: "00ff".to_owned(),
            }],
            pending: PendingCall {
                id: "mcp:double/note".to_owned(),
                digest: "e".to_owned(),
            },
            for_execution: Vec::new(),
            expires_ms: 0,
            claims: String::new(),
        }
    }

    #[test]
    fn a_key_made_in_the_cache_folder_is_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let first = load_key(None, Some(&cache)).unwrap();
        let file = cache.join(KEY_FILE);
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.len(), 32);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // Another start (a replica sharing the folder) reads the same key.
        let second = load_key(None, Some(&cache)).unwrap();
        let bound = context_of("ada", "def main():\n    return 1");
        let sealed = first
            .seal(&state("x"), &bound, Duration::from_secs(60))
            .unwrap();
        assert_eq!(
            second.open(&sealed, &bound).map(|s| s.once),
            Ok("x".to_owned())
        );
        // What it carries is encrypted: the signed payload does not show it.
        let payload = first.codec.open_with(&sealed, &bound).unwrap();
        assert!(!String::from_utf8_lossy(&payload).contains("mcp:double"));
        assert!(
            second
                .open(&sealed, &context_of("bob", "def main():\n    return 1"))
                .is_err()
        );
    }

    #[test]
    fn a_state_opens_for_its_subject_and_program_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "short\n").unwrap();
        assert_eq!(
            load_key(Some(&file), None).unwrap_err().to_string(),
            format!(
                "the approval key {} is 5 bytes; it needs at least 32 (e.g. `openssl rand -hex 32`)",
                file.display()
            )
        );
        std::fs::write(&file, format!("{}\n", "k".repeat(40))).unwrap();
        let key = load_key(Some(&file), None).unwrap();
        let bound = context_of("ada", "p");
        let sealed = key
            .seal(&state("y"), &bound, Duration::from_secs(60))
            .unwrap();
        assert!(key.open(&sealed, &bound).is_ok());
        assert_eq!(
            key.open(&sealed, &context_of("bob", "p")).map(|s| s.once),
            Err("request state failed integrity verification".to_owned())
        );
        assert!(key.open(&sealed, &context_of("ada", "q")).is_err());
        let mut altered = sealed.clone();
        altered.push('A');
        assert!(key.open(&altered, &bound).is_err());
        // Another key does not open it.
        std::fs::write(&file, "m".repeat(40)).unwrap();
        let other = load_key(Some(&file), None).unwrap();
        assert!(other.open(&sealed, &bound).is_err());
    }

    /// Issue 49, F3: a state says how long it is valid, so that the replica
    /// answering it remembers its single use that long, whatever its own
    /// `--approval-timeout`.
    #[test]
    fn a_state_says_how_long_it_is_valid() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "k".repeat(40)).unwrap();
        let key = load_key(Some(&file), None).unwrap();
        let suspended = Suspended {
            calls: Vec::new(),
            pending: PendingCall {
                id: "mcp:double/note".to_owned(),
                digest: "e".to_owned(),
            },
            request: ApprovalRequest {
                question: "Q?".to_owned(),
                capability: "double.note".to_owned(),
                arguments: "{}".to_owned(),
                cut: false,
            },
            for_execution: Vec::new(),
        };
        let answer = input_required(
            &key,
            "ada",
            "p",
            suspended.clone(),
            Duration::from_secs(600),
            1 << 20,
            None,
        )
        .unwrap();
        let sealed = answer.request_state.clone().unwrap();
        let replayed = replay(&key, "ada", "p", &sealed, None, 1 << 20, None).unwrap();
        let valid_for = replayed.valid_for.unwrap();
        assert!(
            valid_for <= Duration::from_secs(600) && valid_for > Duration::from_secs(590),
            "{valid_for:?}"
        );
        // A state sealed before states said: the answering replica's own time.
        let old = key
            .seal(
                &state("z"),
                &context_of("ada", "p"),
                Duration::from_secs(60),
            )
            .unwrap();
        assert_eq!(
            replay(&key, "ada", "p", &old, None, 1 << 20, None)
                .unwrap()
                .valid_for,
            None
        );
        // Issue 49, F2: a state whose claims live in one board's memory opens
        // only where that board is (not in another process, nor after a
        // restart); a server whose claims Redis holds opens any.
        let answer = input_required(
            &key,
            "ada",
            "p",
            suspended,
            Duration::from_secs(600),
            1 << 20,
            Some("board-a"),
        )
        .unwrap();
        let sealed = answer.request_state.clone().unwrap();
        assert!(replay(&key, "ada", "p", &sealed, None, 1 << 20, Some("board-a")).is_ok());
        assert_eq!(
            replay(&key, "ada", "p", &sealed, None, 1 << 20, Some("board-b")).err(),
            Some(ASKED_ELSEWHERE.to_owned())
        );
        assert!(replay(&key, "ada", "p", &sealed, None, 1 << 20, None).is_ok());
        // And one sealed by a server whose claims Redis holds opens in no
        // memory board.
        assert_eq!(
            replay(&key, "ada", "p", &old, None, 1 << 20, Some("board-a")).err(),
            Some(ASKED_ELSEWHERE.to_owned())
        );
    }

    #[test]
    fn a_task_update_keeps_only_what_answers_a_question() {
        let responses: InputResponses = [
            (
                "approval-1",
                json!({"action": "accept", "content": {
                    "approve": true,
                    "approve_for_this_execution": true,
                    "note": "x".repeat(1000),
                }}),
            ),
            (
                "approval-2",
                json!({"action": "accept", "content": {"approve": true}}),
            ),
            ("approval-3", json!("nonsense")),
            ("approval-", json!({"action": "accept"})),
            ("approval-x", json!({"action": "accept"})),
            ("other", json!({"action": "accept"})),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
        assert_eq!(
            Value::Object(task_responses(&responses)),
            json!({
                "approval-1": {"action": "accept", "content": {
                    "approve": true,
                    "approve_for_this_execution": true,
                }},
                "approval-2": {"action": "accept", "content": {"approve": true}},
                "approval-3": {"action": "decline"},
            })
        );
        // Each reads back as what it stands for.
        for given in [
            Answer::Approved,
            Answer::ApprovedForExecution,
            Answer::Declined,
        ] {
            let result: ElicitResult = serde_json::from_value(answered(&given)).unwrap();
            assert_eq!(answer(&result), given);
        }
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

//! Asking a human before a call: the policy said `{"ask": "<question>"}`.
//!
//! The dispatcher asks through the execution's [`Approver`] (the MCP layer's
//! port: an elicitation to the client) with the policy's question, the
//! capability's name and its arguments, and waits on the execution's thread,
//! at most the approver's timeout. The wait does not count against the
//! execution's time budget: its deadline moves by the time waited. An approval
//! holds for that call only, unless the human approved the capability for the
//! rest of the execution. No approver (a client that cannot be asked), a
//! decline or a timeout all end the call as `permission denied`.
//!
//! An approver that cannot wait (a 2026-07-28 client answers in a new request,
//! which may reach another replica) [`suspends`](Approver::suspends): the
//! execution records each successful call (its capability, a digest of its
//! arguments, its encoded result), and at the call to ask about it stops
//! ([`Suspended`]). The MCP layer hands the record to the client, signed, and
//! when the client comes back with the answer the program is run again from the
//! start with a [`Replay`]: each earlier call must be the same capability with
//! the same arguments as recorded, and gets the recorded result without its
//! plugin or upstream being called again; the call asked about gets the
//! answer. A program that asks for anything else at a recorded position ends
//! as `capability failed: the program did not repeat its earlier calls`, so no
//! side effect is ever repeated.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use codemode_value::Value;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::audit::Approval;
use crate::hidden::escape_hidden;

/// Most bytes of a call's arguments shown to the human (as JSON): past it,
/// long strings are cut (each saying so) so that every argument stays in
/// sight; arguments that still do not fit are not shown, and the call is
/// denied rather than approved unseen.
pub const MAX_ARGUMENTS_SHOWN: usize = 4096;

/// Why a call is denied whose arguments cannot be shown whole enough.
pub const ARGUMENTS_TOO_LARGE: &str =
    "its arguments are too large to show the human (4 KiB, long strings cut)";

/// Why a call is denied whose subject has as many executions waiting for a
/// human as it may ([`Waiting`]).
pub const TOO_MANY_WAITING: &str =
    "its subject has half of the execution slots waiting for answers already";

/// Executions waiting for a human (an older client's elicitation, the
/// execution holding its slot meanwhile), per subject: one subject has at most
/// half of the execution slots (at least one) waiting, so that its unanswered
/// questions cannot take every slot from the others (issue 49, D1).
#[derive(Debug)]
pub(crate) struct Waiting {
    per_subject: std::sync::Mutex<std::collections::HashMap<String, usize>>,
    max: usize,
}

/// One execution's place among the waiting; given back when dropped.
pub(crate) struct WaitingPlace {
    waiting: Arc<Waiting>,
    subject: String,
}

impl Waiting {
    /// For `slots` execution slots.
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            per_subject: std::sync::Mutex::default(),
            max: (slots / 2).max(1),
        }
    }

    /// A place for one more execution of `subject` waiting, unless it has
    /// its share waiting already.
    pub(crate) fn enter(self: &Arc<Self>, subject: &str) -> Option<WaitingPlace> {
        let mut per_subject = self
            .per_subject
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = per_subject.entry(subject.to_owned()).or_default();
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(WaitingPlace {
            waiting: self.clone(),
            subject: subject.to_owned(),
        })
    }
}

impl Drop for WaitingPlace {
    fn drop(&mut self) {
        let mut per_subject = self
            .waiting
            .per_subject
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = per_subject.get_mut(&self.subject) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                per_subject.remove(&self.subject);
            }
        }
    }
}

/// How long past the approver's timeout the dispatcher still waits for it to
/// say it withdrew the question.
pub(crate) const WITHDRAW_GRACE: Duration = Duration::from_secs(1);

/// The detail of the `capability failed` of a replayed program that asked for
/// another call than the one recorded at the same position.
pub const DIVERGED: &str = "the program did not repeat its earlier calls";

/// What a human is asked about one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The policy's question (operator text, never shown to the agent).
    pub question: String,
    /// The capability's dotted name.
    pub capability: String,
    /// Its arguments as JSON, at most [`MAX_ARGUMENTS_SHOWN`] bytes.
    pub arguments: String,
    /// Whether strings of the arguments were cut to fit: the human is told
    /// that approving runs them whole.
    #[serde(default)]
    pub cut: bool,
}

/// What the human answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// This call may run.
    Approved,
    /// This call, and every later call of the same capability in this
    /// execution, may run.
    ApprovedForExecution,
    /// It may not (or the human dismissed the question).
    Declined,
    /// No answer came within the approver's timeout (the question was
    /// withdrawn).
    TimedOut,
    /// Nobody could be asked: why, for the log.
    NotAsked(String),
}

/// A future an [`Approver`] answers with.
pub type Asking = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// Asks the human behind an execution's request whether a call may run: the
/// MCP layer's port.
pub trait Approver: Send + Sync {
    /// How long the human may take (`--approval-timeout`).
    fn timeout(&self) -> Duration;

    /// Asks about one call.
    fn ask(&self, request: ApprovalRequest) -> Asking;

    /// Whether it asks by stopping the execution instead of waiting (the
    /// answer comes with a new request, and the program is replayed).
    fn suspends(&self) -> bool {
        false
    }
}

/// One successful native call, as a replay needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// The capability's ID.
    pub id: String,
    /// [`digest`] of its arguments.
    pub digest: String,
    /// Its encoded result, in hex.
    pub result: String,
}

/// The call an execution stopped at: its capability's ID and [`digest`] of
/// its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCall {
    /// The capability's ID.
    pub id: String,
    /// [`digest`] of its arguments.
    pub digest: String,
}

/// An execution that stopped to ask a human: the calls it made, the one it
/// asks about, and the capabilities approved for the rest of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspended {
    /// Its successful calls, in order.
    pub calls: Vec<Recorded>,
    /// The call asked about.
    pub pending: PendingCall,
    /// What the human is asked.
    pub request: ApprovalRequest,
    /// Capability IDs the human approved for the rest of the execution.
    pub for_execution: Vec<String>,
}

/// What a re-run of a suspended execution replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// The calls made before, in order.
    pub calls: Vec<Recorded>,
    /// The call that was asked about, and the human's answer.
    pub pending: PendingCall,
    pub answer: Answer,
    /// Capability IDs approved for the rest of the execution.
    pub for_execution: Vec<String>,
}

/// A digest of a call's canonical arguments: SHA-256 of their encoding (total,
/// and keeping every type apart), in hex.
pub(crate) fn digest(arguments: &Value) -> String {
    let mut bytes = Vec::new();
    codemode_value::encode(arguments, &mut bytes);
    hex::encode(sha2::Sha256::digest(&bytes))
}

/// What `replay` says of the call at `position` of `capability_id` whose
/// arguments have `digest`: its record (`Some`), live (`None`: past the
/// record, the pending call first), or `Err` when it differs from what was
/// recorded or pending there.
pub(super) fn replayed<'a>(
    replay: &'a Replay,
    position: usize,
    capability_id: &str,
    digest: &str,
) -> Result<Option<&'a Recorded>, ()> {
    match replay.calls.get(position) {
        Some(recorded) if recorded.id == capability_id && recorded.digest == digest => {
            Ok(Some(recorded))
        }
        Some(_) => Err(()),
        None if position == replay.calls.len()
            && (replay.pending.id != capability_id || replay.pending.digest != digest) =>
        {
            Err(())
        }
        None => Ok(None),
    }
}

/// How asking about one call ended, as the audit log and the metrics say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Approved,
    ApprovedForExecution,
    ApprovedEarlier,
    Declined,
    TimedOut,
    NotAsked,
    Canceled,
    /// The execution stopped and the question went to the client, whose
    /// answer comes with a new request.
    Awaiting,
}

impl Outcome {
    /// Its text in the audit log and the metrics.
    pub(crate) fn text(self) -> &'static str {
        match self {
            Outcome::Approved => "approved",
            Outcome::ApprovedForExecution => "approved for this execution",
            Outcome::ApprovedEarlier => "approved earlier",
            Outcome::Declined => "declined",
            Outcome::TimedOut => "timed out",
            Outcome::NotAsked => "not asked",
            Outcome::Canceled => "canceled",
            Outcome::Awaiting => "awaiting answer",
        }
    }

    /// Its audit record for `subject`.
    pub(crate) fn audit(self, subject: &str) -> Approval<'_> {
        Approval {
            outcome: self.text(),
            subject,
        }
    }
}

/// What one execution asked so far: the capabilities approved for the rest of
/// it (by ID); and, when its approver suspends, its calls and the replay it
/// runs.
#[derive(Debug, Default)]
pub(crate) struct Approvals {
    pub(super) for_execution: HashSet<String>,
    /// Its successful calls so far (recorded only when the approver suspends).
    pub(super) recorded: Option<Vec<Recorded>>,
    /// The record it replays.
    pub(super) replay: Option<Replay>,
    /// Native calls that reached authorization so far.
    pub(super) position: usize,
    /// Where it stopped to ask, when its approver suspends.
    pub(crate) suspended: Option<Suspended>,
}

impl Approvals {
    /// An execution's: recording when `approver` suspends, replaying `replay`.
    pub(crate) fn new(approver: Option<&Arc<dyn Approver>>, replay: Option<Replay>) -> Self {
        let recording = approver.is_some_and(|approver| approver.suspends());
        Self {
            for_execution: replay
                .as_ref()
                .map(|replay| replay.for_execution.iter().cloned().collect())
                .unwrap_or_default(),
            recorded: recording.then(Vec::new),
            replay,
            position: 0,
            suspended: None,
        }
    }

    /// Whether calls are checked against a record or recorded.
    pub(crate) fn active(&self) -> bool {
        self.recorded.is_some() || self.replay.is_some()
    }
}

/// `arguments` as JSON for a human to read, at most [`MAX_ARGUMENTS_SHOWN`]
/// bytes, and whether a string had to be cut: strings longer than a limit are
/// cut (ending in `…[cut]`), the limit lowered until the whole fits, so that no
/// argument is pushed out of sight. Every character that can hide, reorder or
/// fake text is escaped ([`escape_hidden`]). `None` when even the shortest form
/// does not fit.
pub(crate) fn shown(arguments: &Value) -> Option<(String, bool)> {
    for limit in [usize::MAX, 512, 128, 32, 8] {
        let cut = cut_strings(arguments, limit);
        let text = crate::json::values::to_json(cut)?.to_string();
        let text = escape_hidden(&text);
        if text.len() <= MAX_ARGUMENTS_SHOWN {
            return Some((text, limit != usize::MAX));
        }
    }
    None
}

/// `value` with every string over `limit` characters cut to it.
fn cut_strings(value: &Value, limit: usize) -> Value {
    match value {
        Value::Str(text) if text.chars().count() > limit => {
            let mut cut: String = text.chars().take(limit).collect();
            cut.push_str("…[cut]");
            Value::Str(cut)
        }
        Value::List(items) => Value::List(items.iter().map(|v| cut_strings(v, limit)).collect()),
        Value::Dict(entries) => Value::Dict(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), cut_strings(v, limit)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_shown_as_json_long_strings_cut_so_every_key_stays() {
        let shown_text = |value: &Value| shown(value).map(|(text, _)| text);
        let small = Value::Dict(vec![("message".into(), Value::Str("fix".into()))]);
        assert_eq!(
            shown(&small),
            Some((r#"{"message":"fix"}"#.to_owned(), false))
        );
        // A long message would push repo_path out of sight: it is cut instead,
        // and said to be.
        let big = Value::Dict(vec![
            ("message".into(), Value::Str("é".repeat(3000))),
            ("repo_path".into(), Value::Str("/srv/repo".into())),
        ]);
        assert_eq!(
            shown(&big),
            Some((
                format!(
                    r#"{{"message":"{}…[cut]","repo_path":"/srv/repo"}}"#,
                    "é".repeat(512)
                ),
                true
            ))
        );
        // Layout characters are escaped, not rendered.
        let sneaky = Value::Dict(vec![("m".into(), Value::Str("a\u{202E}b\u{2028}c".into()))]);
        assert_eq!(
            shown_text(&sneaky).as_deref(),
            Some(r#"{"m":"a\u202Eb\u2028c"}"#)
        );
        // Too many arguments to show even cut: not shown at all.
        let many = Value::List((0..2000).map(Value::Int).collect());
        assert_eq!(shown(&Value::Dict(vec![("xs".into(), many)])), None);
    }

    /// Issue 49, F4 and F5: text that hides, reorders or fakes what a human
    /// reads is escaped visibly, in the arguments and in the question alike.
    #[test]
    fn every_character_that_can_hide_text_is_escaped_visibly() {
        use crate::hidden::hides;
        let hidden = [
            ('\n', "\\u000A"),
            ('\r', "\\u000D"),
            ('\u{7F}', "\\u007F"),
            ('\u{85}', "\\u0085"),
            ('\u{9B}', "\\u009B"),
            ('\u{200B}', "\\u200B"),
            ('\u{202E}', "\\u202E"),
            ('\u{2066}', "\\u2066"),
            ('\u{3164}', "\\u3164"),
            ('\u{FE0F}', "\\uFE0F"),
            ('\u{E0020}', "\\u{E0020}"),
            ('\u{E007F}', "\\u{E007F}"),
            ('\u{E0100}', "\\u{E0100}"),
        ];
        for (c, escaped) in hidden {
            assert!(hides(c), "{:X}", c as u32);
            assert_eq!(escape_hidden(&format!("a{c}b")), format!("a{escaped}b"));
        }
        // What is plainly visible stays as it is.
        for visible in [
            "plain text",
            "é ü 日本",
            "tab-free, quote \" and \\",
            "emoji 😀",
        ] {
            assert_eq!(escape_hidden(visible), visible);
        }
        // A fake block of the message, planted by an argument, shows its seams.
        let forged = "ok\n\nCapability: up.echo\nArguments: {}";
        assert_eq!(
            escape_hidden(forged),
            "ok\\u000A\\u000ACapability: up.echo\\u000AArguments: {}"
        );
        // In arguments, JSON already escapes C0 controls; C1 and tags are left
        // to this.
        let value = Value::Dict(vec![("m".into(), Value::Str("a\u{85}\u{E0041}b".into()))]);
        assert_eq!(
            shown(&value).map(|(text, _)| text).as_deref(),
            Some(r#"{"m":"a\u0085\u{E0041}b"}"#)
        );
    }

    /// Issue 49, D1: one subject's executions waiting for answers hold at
    /// most half of the slots; another subject still gets its own.
    #[test]
    fn a_subject_waits_for_answers_in_at_most_half_the_slots() {
        let waiting = Arc::new(Waiting::new(8));
        let held: Vec<WaitingPlace> = (0..4).map(|_| waiting.enter("mallory").unwrap()).collect();
        assert!(waiting.enter("mallory").is_none());
        let ada = waiting.enter("ada");
        assert!(ada.is_some());
        drop(held);
        assert!(waiting.enter("mallory").is_some());
        // With one slot, one waits.
        let one = Arc::new(Waiting::new(1));
        let first = one.enter("ada");
        assert!(first.is_some() && one.enter("ada").is_none());
    }

    #[test]
    fn a_replay_answers_recorded_calls_and_refuses_any_other() {
        let recorded = |id: &str, digest: &str| Recorded {
            id: id.to_owned(),
            digest: digest.to_owned(),
            result: "00".to_owned(),
        };
        let replay = Replay {
            calls: vec![recorded("a", "1"), recorded("b", "2")],
            pending: PendingCall {
                id: "c".to_owned(),
                digest: "3".to_owned(),
            },
            answer: Answer::Approved,
            for_execution: Vec::new(),
        };
        assert_eq!(replayed(&replay, 0, "a", "1"), Ok(Some(&replay.calls[0])));
        assert_eq!(replayed(&replay, 1, "b", "2"), Ok(Some(&replay.calls[1])));
        // Another capability, or other arguments, where one was recorded.
        assert_eq!(replayed(&replay, 0, "b", "2"), Err(()));
        assert_eq!(replayed(&replay, 1, "b", "9"), Err(()));
        // The pending call comes next, and only it.
        assert_eq!(replayed(&replay, 2, "c", "3"), Ok(None));
        assert_eq!(replayed(&replay, 2, "a", "1"), Err(()));
        assert_eq!(replayed(&replay, 2, "c", "4"), Err(()));
        // Past it, calls run live.
        assert_eq!(replayed(&replay, 3, "a", "1"), Ok(None));
        // Arguments of other types differ in their digest.
        assert_ne!(digest(&Value::Int(1)), digest(&Value::Float(1.0)));
        assert_ne!(digest(&Value::Str("1".into())), digest(&Value::Int(1)));
    }

    #[test]
    fn outcomes_have_fixed_texts() {
        let all = [
            Outcome::Approved,
            Outcome::ApprovedForExecution,
            Outcome::ApprovedEarlier,
            Outcome::Declined,
            Outcome::TimedOut,
            Outcome::NotAsked,
            Outcome::Canceled,
            Outcome::Awaiting,
        ];
        assert_eq!(
            all.map(Outcome::text),
            [
                "approved",
                "approved for this execution",
                "approved earlier",
                "declined",
                "timed out",
                "not asked",
                "canceled",
                "awaiting answer"
            ]
        );
    }
}

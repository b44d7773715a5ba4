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

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use codemode_value::Value;

use super::ExecState;
use crate::audit::Approval;
use crate::error::ToolError;
use crate::wait::{self, Abandoned};

/// Most bytes of a call's arguments shown to the human (as JSON; longer ones
/// are cut, and say so).
pub const MAX_ARGUMENTS_SHOWN: usize = 4096;

/// What a human is asked about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    /// The policy's question (operator text, never shown to the agent).
    pub question: String,
    /// The capability's dotted name.
    pub capability: String,
    /// Its arguments as JSON, at most [`MAX_ARGUMENTS_SHOWN`] bytes.
    pub arguments: String,
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
/// it (by ID).
#[derive(Debug, Default)]
pub(crate) struct Approvals {
    for_execution: HashSet<String>,
}

/// Asks whether the call of `capability` (`name`) with `arguments` may run;
/// `Ok` when it may. The outcome is counted and returned for the audit line.
pub(crate) fn approve(
    state: &mut ExecState,
    capability_id: &str,
    name: &str,
    arguments: &Value,
    question: String,
) -> (Outcome, Result<(), ToolError>) {
    let outcome = ask(state, capability_id, name, arguments, question);
    state.metrics.approval(outcome.0.text());
    outcome
}

fn ask(
    state: &mut ExecState,
    capability_id: &str,
    name: &str,
    arguments: &Value,
    question: String,
) -> (Outcome, Result<(), ToolError>) {
    if state.approvals.for_execution.contains(capability_id) {
        return (Outcome::ApprovedEarlier, Ok(()));
    }
    let Some(approver) = state.approver.clone() else {
        tracing::info!(
            subject = %state.subject.id,
            capability = %name,
            reason = "this execution has nobody to ask",
            "call denied: the policy asks a human, who cannot be asked"
        );
        return (Outcome::NotAsked, Err(ToolError::PermissionDenied));
    };
    let request = ApprovalRequest {
        question,
        capability: name.to_owned(),
        arguments: shown(arguments),
    };
    let asked = Instant::now();
    let answer = wait::until(
        asked + approver.timeout(),
        Some(state.stop.cancel()),
        approver.ask(request),
    );
    // Waiting for the human is not the program's time.
    state.stop.extend(asked.elapsed());
    match answer {
        Ok(Answer::Approved) => (Outcome::Approved, Ok(())),
        Ok(Answer::ApprovedForExecution) => {
            state
                .approvals
                .for_execution
                .insert(capability_id.to_owned());
            (Outcome::ApprovedForExecution, Ok(()))
        }
        Ok(Answer::Declined) => (Outcome::Declined, Err(ToolError::PermissionDenied)),
        Ok(Answer::NotAsked(reason)) => {
            tracing::info!(
                subject = %state.subject.id,
                capability = %name,
                reason = %reason,
                "call denied: the policy asks a human, who cannot be asked"
            );
            (Outcome::NotAsked, Err(ToolError::PermissionDenied))
        }
        Err(Abandoned::Deadline) => {
            tracing::info!(
                subject = %state.subject.id,
                capability = %name,
                waited_ms = crate::units::millis(asked.elapsed()),
                "call denied: no answer to its approval in time (--approval-timeout)"
            );
            (Outcome::TimedOut, Err(ToolError::PermissionDenied))
        }
        Err(Abandoned::Cancelled) => (Outcome::Canceled, Err(ToolError::Canceled)),
        Err(Abandoned::NoRuntime) => (Outcome::NotAsked, Err(ToolError::Internal)),
    }
}

/// `arguments` as JSON for a human to read, cut at [`MAX_ARGUMENTS_SHOWN`]
/// bytes (on a character boundary) with a note saying so.
pub(crate) fn shown(arguments: &Value) -> String {
    // Bound arguments are what JSON carries (binding refused the rest).
    let text = super::to_json(arguments.clone())
        .map(|json| json.to_string())
        .unwrap_or_default();
    if text.len() <= MAX_ARGUMENTS_SHOWN {
        return text;
    }
    let note = " … (cut)";
    let mut end = MAX_ARGUMENTS_SHOWN - note.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{note}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_shown_as_json_and_cut_past_the_limit() {
        let small = Value::Dict(vec![("message".into(), Value::Str("fix".into()))]);
        assert_eq!(shown(&small), r#"{"message":"fix"}"#);
        let big = Value::Dict(vec![("text".into(), Value::Str("é".repeat(3000)))]);
        let text = shown(&big);
        assert!(text.len() <= MAX_ARGUMENTS_SHOWN, "{}", text.len());
        assert!(text.starts_with(r#"{"text":"éé"#), "{text}");
        assert!(text.ends_with("é … (cut)"), "{text}");
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
                "canceled"
            ]
        );
    }
}

//! The steps of asking about one native call in a running execution: replayed
//! from a record or run live ([`next_call`]), recorded ([`record`]), asked of
//! the execution's approver and answered ([`approve`]). What they deal in (the
//! approver port, records, outcomes) is `approval.rs`'s; these are the parts
//! that read and change the execution's state.

use std::time::Instant;

use codemode_value::Value;

use super::approval::{
    ARGUMENTS_TOO_LARGE, Answer, ApprovalRequest, DIVERGED, Outcome, PendingCall, Recorded,
    Suspended, TOO_MANY_WAITING, WITHDRAW_GRACE, digest, replayed, shown,
};
use super::state::ExecState;
use crate::error::ToolError;
use crate::hidden::escape_hidden;
use crate::wait::{self, Abandoned};

/// What a native call does in an execution that replays or records.
pub(crate) enum Step {
    /// It was made before: its recorded result, encoded.
    Replayed(Vec<u8>),
    /// It runs (when recording, with this digest).
    Live(Option<String>),
}

/// The next native call, of `capability_id` with `arguments`: replayed from
/// the record while there is one, else live. A call that differs from the
/// record at its position (or a record that does not decode) fails the
/// execution with [`DIVERGED`].
pub(crate) fn next_call(
    state: &mut ExecState,
    capability_id: &str,
    arguments: &Value,
) -> Result<Step, ToolError> {
    let position = state.approvals.position;
    state.approvals.position += 1;
    let recording = state.approvals.recorded.is_some();
    let Some(replay) = &state.approvals.replay else {
        return Ok(Step::Live(recording.then(|| digest(arguments))));
    };
    let digest = digest(arguments);
    let diverged = || ToolError::CapabilityFailed(Some(DIVERGED.to_owned()));
    match replayed(replay, position, capability_id, &digest).map_err(|()| diverged())? {
        Some(recorded) => {
            let bytes = hex::decode(&recorded.result).map_err(|_| diverged())?;
            let recorded = recorded.clone();
            if let Some(calls) = &mut state.approvals.recorded {
                calls.push(recorded);
            }
            Ok(Step::Replayed(bytes))
        }
        None => Ok(Step::Live(Some(digest))),
    }
}

/// Records a live call's result, when the execution records.
pub(crate) fn record(
    state: &mut ExecState,
    capability_id: &str,
    digest: Option<String>,
    bytes: &[u8],
) {
    if let (Some(calls), Some(digest)) = (&mut state.approvals.recorded, digest) {
        calls.push(Recorded {
            id: capability_id.to_owned(),
            digest,
            result: hex::encode(bytes),
        });
    }
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

/// What the human answered, as the outcome of the call asked about.
fn answered(
    state: &mut ExecState,
    capability_id: &str,
    name: &str,
    answer: Answer,
) -> (Outcome, Result<(), ToolError>) {
    match answer {
        Answer::Approved => (Outcome::Approved, Ok(())),
        Answer::ApprovedForExecution => {
            state
                .approvals
                .for_execution
                .insert(capability_id.to_owned());
            (Outcome::ApprovedForExecution, Ok(()))
        }
        Answer::Declined => (Outcome::Declined, Err(ToolError::PermissionDenied)),
        Answer::TimedOut => {
            tracing::info!(
                subject = %state.subject.id,
                capability = %name,
                "call denied: no answer to its approval in time (--approval-timeout)"
            );
            (Outcome::TimedOut, Err(ToolError::PermissionDenied))
        }
        Answer::NotAsked(reason) => {
            tracing::info!(
                subject = %state.subject.id,
                capability = %name,
                reason = %reason,
                "call denied: the policy asks a human, who cannot be asked"
            );
            (Outcome::NotAsked, Err(ToolError::PermissionDenied))
        }
    }
}

/// A call the policy asks a human about, denied because nobody can be asked
/// (`reason`, logged).
fn not_asked(state: &ExecState, name: &str, reason: &str) -> (Outcome, Result<(), ToolError>) {
    tracing::info!(
        subject = %state.subject.id,
        capability = %name,
        reason,
        "call denied: the policy asks a human, who cannot be asked"
    );
    (Outcome::NotAsked, Err(ToolError::PermissionDenied))
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
    // The call a replay was answered for (`next_call` checked it is the one).
    let position = state.approvals.position.saturating_sub(1);
    let answer = match &mut state.approvals.replay {
        Some(replay) if position == replay.calls.len() => {
            Some(std::mem::replace(&mut replay.answer, Answer::Declined))
        }
        Some(_) | None => None,
    };
    if let Some(answer) = answer {
        return answered(state, capability_id, name, answer);
    }
    let Some(approver) = state.approver.clone() else {
        return not_asked(state, name, "this execution has nobody to ask");
    };
    let Some((shown, cut)) = shown(arguments) else {
        return not_asked(state, name, ARGUMENTS_TOO_LARGE);
    };
    let request = ApprovalRequest {
        question: escape_hidden(&question),
        capability: name.to_owned(),
        arguments: shown,
        cut,
    };
    if approver.suspends() {
        state.approvals.suspended = Some(Suspended {
            calls: state.approvals.recorded.clone().unwrap_or_default(),
            pending: PendingCall {
                id: capability_id.to_owned(),
                digest: digest(arguments),
            },
            request,
            for_execution: state.approvals.for_execution.iter().cloned().collect(),
        });
        return (Outcome::Awaiting, Err(ToolError::PermissionDenied));
    }
    // One subject's unanswered questions hold at most its share of the slots.
    let Some(_waiting) = state.waiting.enter(&state.subject.id) else {
        return not_asked(state, name, TOO_MANY_WAITING);
    };
    // The approver withdraws the question at its timeout (and says so); this
    // wait ends a little later in case it cannot.
    // The wait moves the deadline: the quota lease lasts it. First, so that
    // the store's time is not the human's.
    if let Some((gate, lease)) = &state.quota {
        let lasts = state
            .stop
            .deadline()
            .saturating_duration_since(Instant::now())
            + approver.timeout()
            + WITHDRAW_GRACE;
        gate.extend_blocking(lease, lasts);
    }
    let asked = Instant::now();
    let answer = wait::until(
        asked + approver.timeout() + WITHDRAW_GRACE,
        Some(state.stop.cancel()),
        approver.ask(request),
    );
    // Waiting for the human is not the program's time.
    state.stop.extend(asked.elapsed());
    match answer {
        Ok(answer) => answered(state, capability_id, name, answer),
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

//! Asking the human behind an MCP client whether a call may run: the
//! [`Approver`] of an execution whose policy says `{"ask": "<question>"}`.
//!
//! A client on 2025-06-18 or 2025-11-25 that declared form elicitation is sent
//! `elicitation/create` within its `tools/call`: the policy's question, the
//! capability and its arguments, and a yes/no form (with "for the rest of this
//! execution"). Clients that cannot be asked this way get an approver that
//! says why, and their calls are denied.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    BooleanSchema, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    ProtocolVersion,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{Peer, RoleServer};
use serde_json::Value;

use crate::execute::{Answer, ApprovalRequest, Approver, Asking};

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
/// Why a 2026-07-28 client is not asked: that revision asks with an
/// `input_required` result, which this server does not send yet.
pub const NOT_ON_2026: &str =
    "a 2026-07-28 client is asked with input_required, which is not supported yet";
/// Why a client that declared no form elicitation is not asked.
pub const NO_ELICITATION: &str = "the client did not declare form elicitation";
/// Why a task's call is not asked.
pub const NOT_IN_TASKS: &str = "a call in a task cannot ask a human yet";

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
    Cannot(&'static str),
}

impl Approver for Asker {
    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn ask(&self, request: ApprovalRequest) -> Asking {
        let peer = match &self.how {
            How::Elicit(peer) => peer.clone(),
            How::Cannot(reason) => {
                let reason = (*reason).to_owned();
                return Box::pin(async move { Answer::NotAsked(reason) });
            }
        };
        Box::pin(async move {
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: message(&request),
                requested_schema: form(),
            };
            match peer.create_elicitation(params).await {
                Ok(result) => answer(&result),
                Err(error) => Answer::NotAsked(format!("the elicitation failed: {error}")),
            }
        })
    }
}

/// The approver of a `tools/call execute` arriving in `context`: elicitation
/// where the client can be asked that way (`over_http` never, yet), else one
/// that says why not.
pub fn approver(
    context: &RequestContext<RoleServer>,
    over_http: bool,
    timeout: Duration,
) -> Arc<dyn Approver> {
    let revision = context.protocol_version();
    let how = if over_http {
        How::Cannot(NOT_OVER_HTTP)
    } else if revision.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str()) {
        How::Cannot(NOT_ON_2026)
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

//! Every text a model can see when a call fails, and the one function that builds the
//! detail forms.
//!
//! The texts are fixed by the MCP tool contract (the seed's "Errors" table and the Go
//! digest §10): clients and models recover by matching them, so they are constants
//! tested for exact equality. Nothing else in the crate may format a model-visible
//! error; host-derived text (paths, wasmtime errors, plugin messages) goes to the log.

/// The resolver failed or returned an empty subject.
pub const UNAUTHENTICATED: &str = "unauthenticated";
/// `describe_api` did not find an enabled exact name.
pub const CAPABILITY_NOT_FOUND: &str = "capability not found";
/// Fixed prefix: the program was invalid (parse, entry point, runtime, final value).
pub const INVALID_PROGRAM: &str = "invalid program";
/// Fixed prefix: a native call failed binding.
pub const INVALID_CAPABILITY_ARGUMENTS: &str = "invalid capability arguments";
/// The policy returned a recognized denial.
pub const PERMISSION_DENIED: &str = "permission denied";
/// Policy evaluation failed.
pub const AUTHORIZATION_POLICY_FAILURE: &str = "authorization policy failure";
/// A discovery, execution, depth, per-value or aggregate budget was exceeded.
pub const RESOURCE_LIMIT_EXCEEDED: &str = "resource limit exceeded";
/// A capability failed or returned an invalid value.
pub const CAPABILITY_FAILED: &str = "capability failed";
/// The request was cancelled.
pub const CONTEXT_CANCELED: &str = "context canceled";
/// A bare deadline error (execution deadlines project as resource limits instead).
pub const CONTEXT_DEADLINE_EXCEEDED: &str = "context deadline exceeded";
/// Any unknown failure.
pub const INTERNAL_FAILURE: &str = "internal failure";
/// What follows a capability's name in the detail of a call that ran past its
/// plugin's `timeout` grant: `capability failed: weather.now timed out`.
pub const TIMED_OUT: &str = "timed out";
/// What follows `upstream <name>` in the detail of a call whose upstream MCP server
/// cannot answer: `capability failed: upstream git is unavailable`.
pub const UNAVAILABLE: &str = "is unavailable";

/// What follows a source's name (`upstream git`) in the detail of an execution
/// whose program names a source that did not finish starting within the wait
/// for it: `capability failed: upstream git is still starting`.
pub const STILL_STARTING: &str = "is still starting";

/// The end of the detail of a call an upstream refused because of the caller's
/// credentials (HTTP 401 or 403 to its access token).
pub const REFUSED_CREDENTIALS: &str = "refused the caller's credentials";

/// The end of the detail of a call of an upstream acting for its callers, by a
/// caller who has no access token to act with.
pub const NO_CREDENTIALS: &str = "acts for its caller, who has no access token";

/// A failure of one of the three operations, as the model will see it.
///
/// Variants carry only model-derived detail (a parse position, an argument path, a
/// capability's own sanitized message); everything host-derived is logged where it
/// happens and never stored here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// `unauthenticated`: the resolver failed or returned an empty subject.
    #[error("{UNAUTHENTICATED}")]
    Unauthenticated,
    /// `capability not found`: `describe_api` did not find an enabled exact name.
    #[error("{CAPABILITY_NOT_FOUND}")]
    NotFound,
    /// `invalid program`, with a `<codemode>:line:col: message` detail when known.
    #[error("{}", with_detail(INVALID_PROGRAM, .0.as_deref()))]
    InvalidProgram(Option<String>),
    /// `invalid capability arguments`, with a detail naming the rejected argument.
    #[error("{}", with_detail(INVALID_CAPABILITY_ARGUMENTS, .0.as_deref()))]
    InvalidArguments(Option<String>),
    /// `permission denied`: the policy denied the native call.
    #[error("{PERMISSION_DENIED}")]
    PermissionDenied,
    /// `authorization policy failure`: evaluating the policy failed.
    #[error("{AUTHORIZATION_POLICY_FAILURE}")]
    PolicyFailure,
    /// `resource limit exceeded`: a budget ran out.
    #[error("{RESOURCE_LIMIT_EXCEEDED}")]
    ResourceLimit,
    /// `capability failed`, with the capability's sanitized message when it gave one.
    #[error("{}", with_detail(CAPABILITY_FAILED, .0.as_deref()))]
    CapabilityFailed(Option<String>),
    /// `context canceled`: the request was cancelled.
    #[error("{CONTEXT_CANCELED}")]
    Canceled,
    /// `context deadline exceeded`: a bare deadline (an execution's deadline is a
    /// resource limit instead).
    #[error("{CONTEXT_DEADLINE_EXCEEDED}")]
    DeadlineExceeded,
    /// `internal failure`: anything unknown (the cause is logged).
    #[error("{INTERNAL_FAILURE}")]
    Internal,
}

impl ToolError {
    /// The fixed text without any detail: what the audit log and the metrics record
    /// (a detail may quote the caller's data).
    pub fn fixed_text(&self) -> &'static str {
        match self {
            ToolError::Unauthenticated => UNAUTHENTICATED,
            ToolError::NotFound => CAPABILITY_NOT_FOUND,
            ToolError::InvalidProgram(_) => INVALID_PROGRAM,
            ToolError::InvalidArguments(_) => INVALID_CAPABILITY_ARGUMENTS,
            ToolError::PermissionDenied => PERMISSION_DENIED,
            ToolError::PolicyFailure => AUTHORIZATION_POLICY_FAILURE,
            ToolError::ResourceLimit => RESOURCE_LIMIT_EXCEEDED,
            ToolError::CapabilityFailed(_) => CAPABILITY_FAILED,
            ToolError::Canceled => CONTEXT_CANCELED,
            ToolError::DeadlineExceeded => CONTEXT_DEADLINE_EXCEEDED,
            ToolError::Internal => INTERNAL_FAILURE,
        }
    }
}

/// The detail of the [`ToolError::CapabilityFailed`] of a call of `capability` that
/// ran past its plugin's `timeout`. The plugin's file and the timeout's value are
/// host details: the agent gets neither.
pub fn timed_out_detail(capability: &str) -> String {
    format!("{capability} {TIMED_OUT}")
}

/// The detail of the [`ToolError::CapabilityFailed`] of a call whose upstream MCP
/// server is down or broke the protocol: `upstream git is unavailable`. Why is a host
/// detail (logged), never the agent's.
pub fn unavailable_detail(upstream: &str) -> String {
    source_unavailable_detail(&format!("upstream {upstream}"))
}

/// [`unavailable_detail`] of a source named in full (`openapi github is
/// unavailable`): a service that could not be reached.
pub fn source_unavailable_detail(source: &str) -> String {
    format!("{source} {UNAVAILABLE}")
}

/// The detail of the [`ToolError::CapabilityFailed`] of an execution whose
/// program names `source` (a provider's name, `upstream git`), which did not
/// finish starting in time: `upstream git is still starting`.
pub fn still_starting_detail(source: &str) -> String {
    format!("{source} {STILL_STARTING}")
}

/// The detail of the [`ToolError::CapabilityFailed`] of a call the upstream
/// refused for the caller's credentials: `upstream crm refused the caller's
/// credentials`.
pub fn refused_credentials_detail(upstream: &str) -> String {
    source_refused_credentials_detail(&format!("upstream {upstream}"))
}

/// [`refused_credentials_detail`] of a source named in full (`openapi crm`).
pub fn source_refused_credentials_detail(source: &str) -> String {
    format!("{source} {REFUSED_CREDENTIALS}")
}

/// The detail of the [`ToolError::CapabilityFailed`] of a call of an upstream
/// acting for its callers (`auth = "forward"`) by a caller without an access
/// token: `upstream crm acts for its caller, who has no access token`.
pub fn no_credentials_detail(upstream: &str) -> String {
    source_no_credentials_detail(&format!("upstream {upstream}"))
}

/// [`no_credentials_detail`] of a source named in full (`openapi crm`).
pub fn source_no_credentials_detail(source: &str) -> String {
    format!("{source} {NO_CREDENTIALS}")
}

/// Renders `prefix` or `prefix: detail`: the only place a detail form is built.
fn with_detail(prefix: &str, detail: Option<&str>) -> String {
    match detail {
        Some(detail) if !detail.is_empty() => format!("{prefix}: {detail}"),
        _ => prefix.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_texts_are_exactly_the_seed_texts() {
        let cases = [
            (UNAUTHENTICATED, "unauthenticated"),
            (CAPABILITY_NOT_FOUND, "capability not found"),
            (INVALID_PROGRAM, "invalid program"),
            (INVALID_CAPABILITY_ARGUMENTS, "invalid capability arguments"),
            (PERMISSION_DENIED, "permission denied"),
            (AUTHORIZATION_POLICY_FAILURE, "authorization policy failure"),
            (RESOURCE_LIMIT_EXCEEDED, "resource limit exceeded"),
            (CAPABILITY_FAILED, "capability failed"),
            (CONTEXT_CANCELED, "context canceled"),
            (CONTEXT_DEADLINE_EXCEEDED, "context deadline exceeded"),
            (INTERNAL_FAILURE, "internal failure"),
        ];
        for (constant, text) in cases {
            assert_eq!(constant, text);
        }
    }

    #[test]
    fn a_source_still_starting_is_named() {
        assert_eq!(
            ToolError::CapabilityFailed(Some(still_starting_detail("upstream git"))).to_string(),
            "capability failed: upstream git is still starting"
        );
    }

    #[test]
    fn the_credential_details_name_the_upstream() {
        assert_eq!(
            refused_credentials_detail("crm"),
            "upstream crm refused the caller's credentials"
        );
        assert_eq!(
            no_credentials_detail("crm"),
            "upstream crm acts for its caller, who has no access token"
        );
    }

    #[test]
    fn fixed_text_drops_the_detail() {
        let cases = [
            (
                ToolError::InvalidProgram(Some("<codemode>:1:1: x".into())),
                "invalid program",
            ),
            (
                ToolError::InvalidArguments(Some("tags[1]: secret".into())),
                "invalid capability arguments",
            ),
            (
                ToolError::CapabilityFailed(Some("secret".into())),
                "capability failed",
            ),
            (ToolError::PermissionDenied, "permission denied"),
            (ToolError::Unauthenticated, "unauthenticated"),
        ];
        for (error, text) in cases {
            assert_eq!(error.fixed_text(), text);
            assert!(error.to_string().starts_with(text));
        }
    }

    #[test]
    fn tool_errors_render_bare_or_with_detail() {
        let cases = [
            (ToolError::Unauthenticated, "unauthenticated"),
            (ToolError::NotFound, "capability not found"),
            (ToolError::InvalidProgram(None), "invalid program"),
            (
                ToolError::InvalidProgram(Some("<codemode>:1:5: bad".into())),
                "invalid program: <codemode>:1:5: bad",
            ),
            (
                ToolError::InvalidArguments(Some(String::new())),
                "invalid capability arguments",
            ),
            (
                ToolError::InvalidArguments(Some("unknown argument \"x\"".into())),
                "invalid capability arguments: unknown argument \"x\"",
            ),
            (ToolError::PermissionDenied, "permission denied"),
            (ToolError::PolicyFailure, "authorization policy failure"),
            (ToolError::ResourceLimit, "resource limit exceeded"),
            (ToolError::CapabilityFailed(None), "capability failed"),
            (
                ToolError::CapabilityFailed(Some("no book".into())),
                "capability failed: no book",
            ),
            (
                ToolError::CapabilityFailed(Some(timed_out_detail("weather.now"))),
                "capability failed: weather.now timed out",
            ),
            (ToolError::Canceled, "context canceled"),
            (ToolError::DeadlineExceeded, "context deadline exceeded"),
            (ToolError::Internal, "internal failure"),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text, "{error:?}");
        }
    }
}

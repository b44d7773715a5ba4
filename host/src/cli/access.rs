//! Who may call what, and what is recorded (`--policy`, `--approval-timeout`,
//! `--allow-all`, `--subject`, `--audit-log`, ...).

use std::path::PathBuf;
use std::time::Duration;

use codemode_server::LOCAL_SUBJECT;
use codemode_server::authz::DEFAULT_DECISION;

use super::values::positive_duration;

/// Who may call what, and what is recorded: the policy, approval, the fixed
/// subject and the audit log.
#[derive(Debug, clap::Args)]
pub struct AccessFlags {
    /// Authorize native calls with a Rego policy module (repeatable)
    ///
    /// Modules are parsed at start, in file-name order (Rego v1). Each native
    /// call is decided by --policy-decision with the input {"subject":{"id",
    /// "claims","scopes"},"capability":{"id","name","annotations"},
    /// "arguments":{...}} (claims and scopes: the subject's access token's,
    /// see --oauth-issuer; annotations: the readOnlyHint, destructiveHint,
    /// idempotentHint and openWorldHint an upstream tool or a plugin
    /// declares): `true` allows; `false` is
    /// `permission denied`; {"ask": "<question>"} asks the client's user first
    /// (see --approval-timeout); undefined, another value or an error is
    /// `authorization policy failure`. Builtins that read the clock,
    /// randomness or the network, and print, are refused at start. The modules are
    /// read again when one changes and on SIGHUP; a version that does not compile
    /// is logged and the policy in force keeps deciding.
    #[arg(long = "policy", value_name = "FILE", conflicts_with = "allow_all")]
    pub policy: Vec<PathBuf>,

    /// How long a user may take to approve a call, e.g. 2m [default: 10m]
    ///
    /// When a policy decides {"ask": "<question>"}, a client before 2026-07-28
    /// that declared form elicitation, over stdio or over HTTP with
    /// --http-sessions, is asked with the question,
    /// the capability and its arguments; the call runs once approved (or every
    /// call of that capability in the execution, when the user says so); a
    /// 2026-07-28 client, over stdio or HTTP, gets an input_required result and
    /// retries with the answer (see --approval-key), its requestState valid
    /// this long. Declined, unanswered within this time, or a client that
    /// cannot be asked (an older one over HTTP without --http-sessions, a task,
    /// no form elicitation):
    /// the call is `permission denied`. The wait does not count against
    /// --max-execution-time.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub approval_timeout: Option<Duration>,

    /// The key that encrypts and signs approvals' requestState (2026-07-28)
    ///
    /// A 2026-07-28 client is asked with an input_required result and comes
    /// back with the answer in a new request, which any replica may take: the
    /// state it carries (the calls made before the question) is encrypted and
    /// signed with this key (at least 32 bytes, e.g. `openssl rand -hex 32`),
    /// so replicas behind one load balancer share the file. Without it,
    /// approval.key in the cache folder is used, made there when absent; where
    /// that cannot be (no cache folder, a read-only one), a key of this process
    /// is drawn (a WARN says so), whose states no other replica, and not this
    /// one after a restart, can open.
    #[arg(long, value_name = "FILE")]
    pub approval_key: Option<PathBuf>,

    /// The rule --policy decides with [default: data.codemode.authz.allow]
    ///
    /// A ground reference under `data`, e.g. data.acme.mcp.allow.
    #[arg(long, value_name = "REF", default_value = DEFAULT_DECISION, hide_default_value = true)]
    pub policy_decision: String,

    /// The rule --policy decides with what each subject can find
    ///
    /// A ground reference under `data`, e.g. data.codemode.authz.visible,
    /// evaluated for each subject and capability with the input of
    /// --policy-decision without "arguments". Only `true` shows the
    /// capability; to a subject it is not shown to, search_api, describe_api
    /// and execute answer as for a disabled one (not found, never suggested).
    /// `false` hides it, and so do undefined, another value or an error (a WARN
    /// names the first). Decided once per subject (its ID and its token's
    /// claims: a new token anew) and capability, and again after a policy
    /// reload or a change of the capabilities. Without it every subject finds
    /// every capability.
    #[arg(long, value_name = "REF", requires = "policy")]
    pub visibility_decision: Option<String>,

    /// The rule --policy decides each subject's quotas with
    ///
    /// A ground reference under `data`, e.g. data.codemode.authz.quota,
    /// evaluated once per execution with the input {"subject": {"id",
    /// "claims", "scopes"}}. An object of quota names and limits, e.g.
    /// {"executions-per-minute": 10, "fuel-per-day": 100000000000}, sets
    /// those quotas for the subject, the config file's `[[quota]]` tables
    /// filling in the rest; undefined leaves the tables'. Any other value, an
    /// unknown name or a limit below 1 refuses the execution with
    /// `authorization policy failure` (a WARN says why).
    #[arg(long, value_name = "REF", requires = "policy")]
    pub quota_decision: Option<String>,

    /// Allow every native call, without a policy
    ///
    /// Required by the HTTP listener when no --policy is given. Over stdio, every
    /// call is allowed for the single local subject when neither is given.
    #[arg(long)]
    pub allow_all: bool,

    /// The subject of every call over stdio, or HTTP without --tokens
    ///
    /// What a policy sees as input.subject.id [default: local]. An empty subject
    /// is unauthenticated: every tool call answers `unauthenticated`.
    #[arg(long, value_name = "ID", default_value = LOCAL_SUBJECT, hide_default_value = true)]
    pub subject: String,

    /// Append the audit log to FILE
    ///
    /// One JSON line per native call: time, execution, subject, capability_id,
    /// capability, decision, outcome, fuel, duration_us. Never argument values or
    /// results. Default: stdout with --listen (the log is on stderr), else stderr.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
}

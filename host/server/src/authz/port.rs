//! The [`Authorizer`] port: what it decides on, what it decides, and the two
//! authorizers that need no policy ([`AllowAll`], [`Replaceable`]).

use std::sync::atomic::{AtomicU64, Ordering};

use codemode_value::Value;

use super::subject::Subject;
use crate::catalog::Annotations;

/// What an authorizer decides on: one native call, after binding.
#[derive(Debug)]
pub struct AuthorizationInput<'a> {
    /// Who asks.
    pub subject: &'a Subject,
    /// The capability's stable ID.
    pub capability_id: &'a str,
    /// The capability's dotted name.
    pub capability_name: &'a str,
    /// The canonical arguments: a dict in name order of the values as the capability
    /// receives them, optional fields given as `None` or omitted left out at every
    /// level. Empty when [`Authorizer::wants_arguments`] is false.
    pub arguments: &'a Value,
    /// What the capability's source says of its effects.
    pub annotations: &'a Annotations,
}

/// Most bytes of the question a policy asks a human (`{"ask": "..."}`).
pub const MAX_QUESTION_BYTES: usize = 1024;

/// What a policy decided about a call it did not deny.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The call runs.
    Allow,
    /// A human must approve it first: the policy's question, operator text
    /// shown to the human and never to the agent (at most
    /// [`MAX_QUESTION_BYTES`], printable).
    Ask(String),
}

/// Why a call was not allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthzError {
    /// The policy denied the call (`permission denied`).
    #[error("authorization denied")]
    Denied,
    /// The policy could not decide (`authorization policy failure`); the reason is
    /// for the log only.
    #[error("authorization policy failure: {0}")]
    Failure(String),
}

/// Decides whether one native call may run. Called once per call, after binding and
/// before the plugin, concurrently from several executions.
pub trait Authorizer: Send + Sync + std::fmt::Debug {
    /// [`Verdict::Allow`] lets the call run; [`Verdict::Ask`] lets it run once
    /// a human approved it.
    ///
    /// # Errors
    ///
    /// [`AuthzError::Denied`] or [`AuthzError::Failure`].
    fn authorize(&self, input: &AuthorizationInput<'_>) -> Result<Verdict, AuthzError>;

    /// Whether decisions read the arguments; when not, they are not built (they cost
    /// a copy of every argument per call).
    fn wants_arguments(&self) -> bool {
        true
    }

    /// Whether `input.subject` can find the capability of `input` (its arguments
    /// are not read): a hidden one is, for that subject, as if it were disabled.
    /// Asked only when [`Authorizer::decides_visibility`].
    ///
    /// # Errors
    ///
    /// [`AuthzError::Failure`] when the decision cannot be made; the caller hides
    /// the capability.
    fn visible(&self, _input: &AuthorizationInput<'_>) -> Result<bool, AuthzError> {
        Ok(true)
    }

    /// Whether some capability may be hidden from some subject; when not, every
    /// subject sees the whole catalog and [`Authorizer::visible`] is never asked.
    fn decides_visibility(&self) -> bool {
        false
    }

    /// The quotas the policy gives `subject` (decided from its ID and its
    /// token's claims and scopes), as an object of quota names and limits,
    /// when it decides them; `None` leaves the config file's. Asked once per
    /// execution.
    ///
    /// # Errors
    ///
    /// [`AuthzError::Failure`] when the decision cannot be made: the execution
    /// is refused.
    fn quota(
        &self,
        _subject: &Subject,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, AuthzError> {
        Ok(None)
    }

    /// Whether [`Authorizer::quota`] may set quotas; when not, it is never
    /// asked.
    fn decides_quotas(&self) -> bool {
        false
    }

    /// Which policy decides: a number that changes whenever the decisions may
    /// have (a reloaded policy), so what was decided before can be dropped.
    fn version(&self) -> u64 {
        0
    }
}

/// An authorizer that can be replaced while serving (a policy reloaded on SIGHUP or
/// when its files change). Each decision is made whole by the authorizer in place
/// when it is asked; a replacement never changes a decision under way.
#[derive(Debug)]
pub struct Replaceable {
    current: arc_swap::ArcSwap<Box<dyn Authorizer>>,
    /// Counts replacements: [`Authorizer::version`].
    replaced: AtomicU64,
}

impl Replaceable {
    /// Starts with `authorizer`.
    pub fn new(authorizer: Box<dyn Authorizer>) -> Self {
        Self {
            current: arc_swap::ArcSwap::from_pointee(authorizer),
            replaced: AtomicU64::new(0),
        }
    }

    /// Puts `authorizer` in place for every decision asked from now on.
    pub fn replace(&self, authorizer: Box<dyn Authorizer>) {
        self.current.store(std::sync::Arc::new(authorizer));
        self.replaced.fetch_add(1, Ordering::AcqRel);
    }
}

impl Authorizer for Replaceable {
    fn authorize(&self, input: &AuthorizationInput<'_>) -> Result<Verdict, AuthzError> {
        self.current.load().authorize(input)
    }

    /// Always: the authorizer in place when the arguments are built may not be the
    /// one that decides.
    fn wants_arguments(&self) -> bool {
        true
    }

    fn visible(&self, input: &AuthorizationInput<'_>) -> Result<bool, AuthzError> {
        self.current.load().visible(input)
    }

    fn decides_visibility(&self) -> bool {
        self.current.load().decides_visibility()
    }

    fn quota(
        &self,
        subject: &Subject,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, AuthzError> {
        self.current.load().quota(subject)
    }

    fn decides_quotas(&self) -> bool {
        self.current.load().decides_quotas()
    }

    /// Bumped after each replacement is in place: a view decided while it is
    /// stored may be kept under the old number, never under the new one.
    fn version(&self) -> u64 {
        self.replaced.load(Ordering::Acquire)
    }
}

/// Allows every call: the single local subject of a stdio server.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize(&self, _input: &AuthorizationInput<'_>) -> Result<Verdict, AuthzError> {
        Ok(Verdict::Allow)
    }

    fn wants_arguments(&self) -> bool {
        false
    }
}

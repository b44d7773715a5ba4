//! The quotas on one capability's calls: which of a subject's calls have
//! them (found once per execution), and the count each such call makes in
//! the store just before it runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::gate::QuotaGate;
use super::subjects::QuotaHit;
use crate::authz::Subject;
use crate::source::Cancel;
use crate::store::{CallCounted, CallLimits, StoreError, Until};

/// One execution's quotas on capabilities' calls: its subject's, by
/// capability (ID or name, as the tables name it).
#[derive(Debug)]
pub(crate) struct CallQuotas {
    gate: Arc<QuotaGate>,
    owner: Arc<str>,
    limits: HashMap<String, CallLimits>,
}

/// What the count of one call decided.
#[derive(Debug)]
pub(crate) enum CallCharge {
    /// The call runs: counted, or no quota is on it, or the store did not
    /// answer and quotas fail open.
    Runs,
    /// A quota refuses it.
    Refused(QuotaHit),
    /// The store did not answer, and quotas fail closed.
    Unavailable,
}

impl CallQuotas {
    /// `subject`'s quotas on capabilities' calls under `gate`; `None` when it
    /// has none (its calls are not counted).
    pub(crate) fn of(gate: &Arc<QuotaGate>, subject: &Subject) -> Option<Arc<Self>> {
        let limits = gate.quotas().calls_of(subject);
        (!limits.is_empty()).then(|| {
            Arc::new(Self {
                gate: gate.clone(),
                owner: Arc::from(subject.owner()),
                limits,
            })
        })
    }

    /// Counts a call about to run of the capability with the ID `id` and
    /// the name `name` (a table names either; the ID first), waiting for the
    /// store until `deadline` or `cancel`: on the execution's thread, which
    /// may block. Its count is kept under what the table names.
    pub(crate) fn charge(
        &self,
        id: &str,
        name: &str,
        deadline: Instant,
        cancel: &Arc<Cancel>,
    ) -> CallCharge {
        let Some((capability, limits)) = self.limits_of(id, name) else {
            return CallCharge::Runs;
        };
        match self.count(capability, *limits, deadline, cancel) {
            Ok(CallCounted::Counted) => CallCharge::Runs,
            Ok(CallCounted::Refused {
                quota,
                resets_in_ms,
            }) => {
                self.gate.metrics().quota_refusal(quota.name());
                tracing::info!(
                    subject = %self.owner,
                    capability = capability.as_str(),
                    quota = quota.name(),
                    resets_in_ms,
                    "call refused by a quota"
                );
                CallCharge::Refused(QuotaHit::of_call(quota, capability, resets_in_ms))
            }
            // The execution's time or request ended first: it says so.
            Err(_) if cancel.is_cancelled() || Instant::now() >= deadline => {
                CallCharge::Unavailable
            }
            Err(error) => {
                tracing::warn!(reason = %error, capability = capability.as_str(), "a call's quotas cannot be checked: the store did not answer");
                if self.gate.fails_open() {
                    CallCharge::Runs
                } else {
                    CallCharge::Unavailable
                }
            }
        }
    }

    /// The quota that would refuse a call of the capability with the ID
    /// `id` and the name `name` now, counting nothing: asked before a human
    /// is asked to approve it, so that nobody approves a call that cannot run.
    /// `None` when none would, or the store did not answer (the count that
    /// follows the approval decides then).
    pub(crate) fn peek(
        &self,
        id: &str,
        name: &str,
        deadline: Instant,
        cancel: &Arc<Cancel>,
    ) -> Option<QuotaHit> {
        let (capability, limits) = self.limits_of(id, name)?;
        match self.peek_in_store(capability, *limits, deadline, cancel) {
            Ok(CallCounted::Counted) | Err(_) => None,
            Ok(CallCounted::Refused {
                quota,
                resets_in_ms,
            }) => {
                self.gate.metrics().quota_refusal(quota.name());
                tracing::info!(
                    subject = %self.owner,
                    capability = capability.as_str(),
                    quota = quota.name(),
                    resets_in_ms,
                    "call refused by a quota before its approval was asked"
                );
                Some(QuotaHit::of_call(quota, capability, resets_in_ms))
            }
        }
    }

    fn peek_in_store(
        &self,
        capability: &str,
        limits: CallLimits,
        deadline: Instant,
        cancel: &Arc<Cancel>,
    ) -> Result<CallCounted, StoreError> {
        let store = self.gate.store();
        #[cfg(feature = "redis")]
        if let Some(redis) = store.redis() {
            let redis = redis?;
            return match crate::wait::until(
                deadline,
                Some(cancel),
                redis.quota_call_peek(&self.owner, capability, limits),
            ) {
                Ok(peeked) => peeked.map_err(|reason| store.error(reason)),
                Err(_) => Err(store.error("no answer in time")),
            };
        }
        // A read: nothing to wait for but the disk.
        let _ = (deadline, cancel);
        store.quota_call_peek(&self.owner, capability, limits)
    }

    /// The quotas on the capability with the ID `id` and the name `name`,
    /// and what their table names it: the ID first.
    fn limits_of(&self, id: &str, name: &str) -> Option<(&String, &CallLimits)> {
        [id, name]
            .into_iter()
            .find_map(|key| self.limits.get_key_value(key))
    }

    fn count(
        &self,
        capability: &str,
        limits: CallLimits,
        deadline: Instant,
        cancel: &Arc<Cancel>,
    ) -> Result<CallCounted, StoreError> {
        let store = self.gate.store();
        #[cfg(feature = "redis")]
        if let Some(redis) = store.redis() {
            let redis = redis?;
            let mut call = [0u8; 8];
            getrandom::fill(&mut call).map_err(|error| store.error(error))?;
            let call = u64::from_le_bytes(call);
            return match crate::wait::until(
                deadline,
                Some(cancel),
                redis.quota_call(&self.owner, capability, limits, call),
            ) {
                Ok(counted) => counted.map_err(|reason| store.error(reason)),
                Err(abandoned) => Err(store.error(match abandoned {
                    crate::wait::Abandoned::Deadline => "no answer before the execution's deadline",
                    crate::wait::Abandoned::Cancelled => "the request was cancelled first",
                    crate::wait::Abandoned::NoRuntime => "no runtime to reach Redis from",
                })),
            };
        }
        let until = Until {
            deadline,
            cancel: cancel.clone(),
        };
        store.quota_call(&self.owner, capability, limits, &until)
    }
}

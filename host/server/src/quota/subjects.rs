//! Whose quotas are which: the defaults, the subjects with their own, the
//! quotas on one capability's calls, and what an execution a quota stopped is
//! told.

use std::collections::HashMap;

use crate::authz::Subject;
use crate::store::{CallLimits, CallQuota, Quota, QuotaLimits};

/// Whom a `[[quota]]` table with a `subject` is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaSubject {
    /// The subject's identifier (a token's `sub`, a tokens file's subject).
    pub id: String,
    /// The issuer its token must come from (`iss`); `None`: any, and subjects
    /// without a token.
    pub issuer: Option<String>,
}

impl QuotaSubject {
    fn matches(&self, subject: &Subject) -> bool {
        subject.id == self.id
            && self
                .issuer
                .as_deref()
                .is_none_or(|issuer| subject.issuer() == Some(issuer))
    }
}

/// Quotas on the calls of one capability (a `[[quota]]` table with
/// `capability`), each subject counted apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapabilityQuota {
    /// The capability's ID (`input.capability.id` in the policy) or its
    /// name (as programs call it).
    pub capability: String,
    /// The subject these are for; `None`: every subject's, which a table of
    /// the subject's own fills in.
    pub subject: Option<QuotaSubject>,
    /// The quotas.
    pub limits: CallLimits,
}

/// Every subject's quotas: the defaults, the subjects with their own, and
/// the quotas on capabilities' calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quotas {
    /// What every subject gets (a `[[quota]]` table without `subject`).
    pub defaults: QuotaLimits,
    /// Subjects with quotas of their own, which the defaults fill in; the
    /// first that matches decides.
    pub subjects: Vec<(QuotaSubject, QuotaLimits)>,
    /// Quotas on the calls of single capabilities.
    pub capabilities: Vec<CapabilityQuota>,
}

impl Quotas {
    /// `subject`'s quotas.
    pub fn of(&self, subject: &Subject) -> QuotaLimits {
        self.subjects
            .iter()
            .find(|(who, _)| who.matches(subject))
            .map_or(self.defaults, |(_, own)| own.or(self.defaults))
    }

    /// `subject`'s quotas on capabilities' calls, by capability (ID or name,
    /// as the tables name it): for each
    /// capability, the first table of the subject's own, filled in by the
    /// table for every subject.
    pub fn calls_of(&self, subject: &Subject) -> HashMap<String, CallLimits> {
        let mut limits: HashMap<String, CallLimits> = self
            .capabilities
            .iter()
            .filter(|quota| quota.subject.is_none())
            .map(|quota| (quota.capability.clone(), quota.limits))
            .collect();
        let mut own = std::collections::HashSet::new();
        for quota in &self.capabilities {
            let Some(who) = &quota.subject else {
                continue;
            };
            if who.matches(subject) && own.insert(quota.capability.as_str()) {
                let everyone = limits.get(&quota.capability).copied().unwrap_or_default();
                limits.insert(quota.capability.clone(), quota.limits.or(everyone));
            }
        }
        limits
    }

    /// Whether any subject has a quota.
    pub fn is_empty(&self) -> bool {
        self.defaults.is_empty()
            && self.subjects.iter().all(|(_, own)| own.is_empty())
            && self.capabilities.is_empty()
    }
}

/// A quota that refused an execution or stopped it, and how long until it
/// allows more; in the `_meta` of the result as `quota`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QuotaHit {
    /// The quota's name ([`Quota::name`], [`CallQuota::name`]).
    pub name: &'static str,
    /// For a quota on one capability's calls, the capability as its table
    /// names it (its ID or its name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    /// When its window ends (for `concurrent-executions`: when the running
    /// lease that ends first must have ended), RFC 3339 in UTC.
    pub resets_at: String,
    /// The same, in whole seconds from the answer, rounded up.
    pub resets_in_seconds: u64,
}

impl QuotaHit {
    /// `quota`, which allows more in `resets_in_ms` milliseconds by the store's
    /// clock.
    pub fn new(quota: Quota, resets_in_ms: u64) -> Self {
        Self::named(quota.name(), None, resets_in_ms)
    }

    /// `quota` on the calls of `capability`, which allows more in
    /// `resets_in_ms` milliseconds by the store's clock.
    pub fn of_call(quota: CallQuota, capability: &str, resets_in_ms: u64) -> Self {
        Self::named(quota.name(), Some(capability.to_owned()), resets_in_ms)
    }

    fn named(name: &'static str, capability: Option<String>, resets_in_ms: u64) -> Self {
        let resets_in = std::time::Duration::from_millis(resets_in_ms);
        Self {
            name,
            capability,
            resets_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now() + resets_in)
                .to_string(),
            resets_in_seconds: resets_in_ms.div_ceil(1000),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subjects_own_quotas_are_filled_in_by_the_defaults() {
        let quotas = Quotas {
            defaults: QuotaLimits {
                executions_per_minute: Some(10),
                fuel_per_day: Some(1000),
                ..QuotaLimits::default()
            },
            subjects: vec![(
                QuotaSubject {
                    id: "alice".to_owned(),
                    issuer: None,
                },
                QuotaLimits {
                    executions_per_minute: Some(100),
                    concurrent_executions: Some(2),
                    ..QuotaLimits::default()
                },
            )],
            capabilities: Vec::new(),
        };
        assert_eq!(
            quotas.of(&Subject::new("alice")),
            QuotaLimits {
                executions_per_minute: Some(100),
                native_calls_per_day: None,
                fuel_per_day: Some(1000),
                concurrent_executions: Some(2),
            }
        );
        assert_eq!(quotas.of(&Subject::new("bob")), quotas.defaults);
    }

    #[test]
    fn a_subjects_own_call_quotas_are_filled_in_by_everyones_for_that_capability() {
        let who = |id: &str, issuer: Option<&str>| QuotaSubject {
            id: id.to_owned(),
            issuer: issuer.map(str::to_owned),
        };
        let quota = |capability: &str, subject, minute, day| CapabilityQuota {
            capability: capability.to_owned(),
            subject,
            limits: CallLimits {
                calls_per_minute: minute,
                calls_per_day: day,
            },
        };
        let quotas = Quotas {
            capabilities: vec![
                quota("notes.write", None, Some(2), Some(20)),
                quota(
                    "notes.write",
                    Some(who("alice", Some("https://elsewhere"))),
                    Some(9),
                    None,
                ),
                quota("notes.write", Some(who("alice", None)), Some(5), None),
                quota("mail.send", Some(who("alice", None)), None, Some(1)),
            ],
            ..Quotas::default()
        };
        assert!(!quotas.is_empty());
        let limits = |minute, day| CallLimits {
            calls_per_minute: minute,
            calls_per_day: day,
        };
        // The first table of alice's own that matches (the issuer's does
        // not: her token has none), everyone's day filling in.
        assert_eq!(
            quotas.calls_of(&Subject::new("alice")),
            HashMap::from([
                ("notes.write".to_owned(), limits(Some(5), Some(20))),
                ("mail.send".to_owned(), limits(None, Some(1))),
            ])
        );
        assert_eq!(
            quotas.calls_of(&Subject::new("bob")),
            HashMap::from([("notes.write".to_owned(), limits(Some(2), Some(20)))])
        );
        assert!(Quotas::default().calls_of(&Subject::new("bob")).is_empty());
    }

    #[test]
    fn a_hit_rounds_its_seconds_up() {
        let hit = QuotaHit::new(Quota::ExecutionsPerMinute, 1001);
        assert_eq!(hit.resets_in_seconds, 2);
        assert_eq!(hit.name, "executions-per-minute");
        assert!(hit.resets_at.ends_with('Z'), "{}", hit.resets_at);
        assert_eq!(hit.capability, None);
        let hit = QuotaHit::of_call(CallQuota::CallsPerDay, "notes.write", 60_000);
        assert_eq!(
            (hit.name, hit.capability.as_deref(), hit.resets_in_seconds),
            ("calls-per-day", Some("notes.write"), 60)
        );
    }
}

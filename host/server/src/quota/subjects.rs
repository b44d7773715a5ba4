//! Whose quotas are which: the defaults, the subjects with their own, and
//! what an execution a quota stopped is told.

use crate::authz::Subject;
use crate::store::{Quota, QuotaLimits};

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

/// Every subject's quotas: the defaults, and the subjects with their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quotas {
    /// What every subject gets (a `[[quota]]` table without `subject`).
    pub defaults: QuotaLimits,
    /// Subjects with quotas of their own, which the defaults fill in; the
    /// first that matches decides.
    pub subjects: Vec<(QuotaSubject, QuotaLimits)>,
}

impl Quotas {
    /// `subject`'s quotas.
    pub fn of(&self, subject: &Subject) -> QuotaLimits {
        self.subjects
            .iter()
            .find(|(who, _)| who.matches(subject))
            .map_or(self.defaults, |(_, own)| own.or(self.defaults))
    }

    /// Whether any subject has a quota.
    pub fn is_empty(&self) -> bool {
        self.defaults.is_empty() && self.subjects.iter().all(|(_, own)| own.is_empty())
    }
}

/// A quota that refused an execution or stopped it, and how long until it
/// allows more; in the `_meta` of the result as `quota`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QuotaHit {
    /// The quota's name ([`Quota::name`]).
    pub name: &'static str,
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
        let resets_in = std::time::Duration::from_millis(resets_in_ms);
        Self {
            name: quota.name(),
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
    fn a_hit_rounds_its_seconds_up() {
        let hit = QuotaHit::new(Quota::ExecutionsPerMinute, 1001);
        assert_eq!(hit.resets_in_seconds, 2);
        assert_eq!(hit.name, "executions-per-minute");
        assert!(hit.resets_at.ends_with('Z'), "{}", hit.resets_at);
    }
}

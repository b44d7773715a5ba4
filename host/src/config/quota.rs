//! `[[quota]]` tables: how much each subject may run across executions and
//! replicas. A table without `subject` sets every subject's defaults; a table
//! with one sets that subject's own, the defaults filling in the rest. A
//! table with `capability` sets quotas on that capability's calls the same
//! way (every subject's, or one subject's own), each subject counted apart.

use codemode_server::quota::{
    CallLimits, CallQuota, CapabilityQuota, Quota, QuotaLimits, QuotaSubject, Quotas,
};
use serde::Deserialize;

/// The key of the quota tables (`[[quota]]`).
pub(super) const QUOTA_KEY: &str = "quota";

/// The file's `[[quota]]` tables.
#[derive(Debug, Deserialize)]
struct QuotaTables {
    #[serde(default)]
    quota: Vec<toml::Spanned<QuotaTable>>,
}

/// One `[[quota]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct QuotaTable {
    subject: Option<String>,
    issuer: Option<String>,
    capability: Option<String>,
    executions_per_minute: Option<u64>,
    native_calls_per_day: Option<u64>,
    fuel_per_day: Option<u64>,
    concurrent_executions: Option<u64>,
    calls_per_minute: Option<u64>,
    calls_per_day: Option<u64>,
}

impl QuotaTable {
    fn limits(&self) -> QuotaLimits {
        QuotaLimits {
            executions_per_minute: self.executions_per_minute,
            native_calls_per_day: self.native_calls_per_day,
            fuel_per_day: self.fuel_per_day,
            concurrent_executions: self.concurrent_executions,
        }
    }

    fn call_limits(&self) -> CallLimits {
        CallLimits {
            calls_per_minute: self.calls_per_minute,
            calls_per_day: self.calls_per_day,
        }
    }
}

/// The names of `quotas`, for a message.
fn listed<Q: Copy>(quotas: &[Q], name: fn(Q) -> &'static str) -> String {
    quotas
        .iter()
        .map(|quota| name(*quota))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The quotas of the config file `text`.
///
/// # Errors
///
/// The byte offset of the fault and what it is.
pub(super) fn quotas(text: &str) -> Result<Quotas, (usize, String)> {
    let parsed: QuotaTables = toml::from_str(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        (offset, format!("[[{QUOTA_KEY}]]: {}", error.message()))
    })?;
    let mut quotas = Quotas::default();
    let mut defaults_at = None;
    for table in parsed.quota {
        let offset = table.span().start;
        let table = table.into_inner();
        let at = |message: String| (offset, format!("[[{QUOTA_KEY}]]: {message}"));
        let limits = table.limits();
        let calls = table.call_limits();
        if let Some(capability) = table.capability {
            if capability.is_empty() {
                return Err(at("`capability` is empty".to_owned()));
            }
            if let Some(quota) = Quota::ALL
                .into_iter()
                .find(|quota| limits.get(*quota).is_some())
            {
                return Err(at(format!(
                    "`{quota}` is a quota of executions; a table with `capability` sets {}",
                    listed(&CallQuota::ALL, CallQuota::name)
                )));
            }
            if calls.is_empty() {
                return Err(at(format!(
                    "sets no quota on `{capability}`; give one or more of {}",
                    listed(&CallQuota::ALL, CallQuota::name)
                )));
            }
            if let Some(quota) = CallQuota::ALL
                .into_iter()
                .find(|quota| calls.get(*quota) == Some(0))
            {
                return Err(at(format!(
                    "`{quota}` must be at least 1 (to stop a capability, deny it in the policy)"
                )));
            }
            let subject = match (table.subject, table.issuer) {
                (None, Some(_)) => {
                    return Err(at(
                        "`issuer` needs a `subject`: without one the table is every subject's"
                            .to_owned(),
                    ));
                }
                (None, None) => None,
                (Some(id), _) if id.is_empty() => {
                    return Err(at("`subject` is empty".to_owned()));
                }
                (Some(id), issuer) => Some(QuotaSubject { id, issuer }),
            };
            let quota = CapabilityQuota {
                capability,
                subject,
                limits: calls,
            };
            if quotas
                .capabilities
                .iter()
                .any(|other| other.capability == quota.capability && other.subject == quota.subject)
            {
                return Err(at(match &quota.subject {
                    None => format!(
                        "a second table for `{}` without `subject`: every subject's quotas on it are set once",
                        quota.capability
                    ),
                    Some(who) => format!(
                        "subject `{}` has a table for `{}` already",
                        who.id, quota.capability
                    ),
                }));
            }
            quotas.capabilities.push(quota);
            continue;
        }
        if let Some(quota) = CallQuota::ALL
            .into_iter()
            .find(|quota| calls.get(*quota).is_some())
        {
            return Err(at(format!(
                "`{quota}` needs a `capability`: the capability whose calls it counts"
            )));
        }
        if limits.is_empty() {
            return Err(at(format!(
                "sets no quota; give one or more of {} (or a `capability` and {})",
                listed(&Quota::ALL, Quota::name),
                listed(&CallQuota::ALL, CallQuota::name)
            )));
        }
        if let Some(quota) = Quota::ALL
            .into_iter()
            .find(|quota| limits.get(*quota) == Some(0))
        {
            return Err(at(format!(
                "`{quota}` must be at least 1 (to stop a subject, deny it in the policy)"
            )));
        }
        match (table.subject, table.issuer) {
            (None, Some(_)) => {
                return Err(at(
                    "`issuer` needs a `subject`: the defaults are every subject's".to_owned(),
                ));
            }
            (None, None) => {
                if defaults_at.replace(offset).is_some() {
                    return Err(at(
                        "a second table without `subject`: every subject's defaults are set once"
                            .to_owned(),
                    ));
                }
                quotas.defaults = limits;
            }
            (Some(id), issuer) => {
                if id.is_empty() {
                    return Err(at("`subject` is empty".to_owned()));
                }
                let who = QuotaSubject { id, issuer };
                if quotas.subjects.iter().any(|(other, _)| *other == who) {
                    return Err(at(format!("subject `{}` has a table already", who.id)));
                }
                quotas.subjects.push((who, limits));
            }
        }
    }
    Ok(quotas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_a_subjects_own_quotas_are_read() {
        let text = r#"
listen = "127.0.0.1:0"

[[quota]]
executions-per-minute = 30
fuel-per-day = 1000000000

[[quota]]
subject = "alice"
issuer = "https://id.example"
executions-per-minute = 120
concurrent-executions = 2
"#;
        assert_eq!(
            quotas(text),
            Ok(Quotas {
                defaults: QuotaLimits {
                    executions_per_minute: Some(30),
                    fuel_per_day: Some(1_000_000_000),
                    ..QuotaLimits::default()
                },
                subjects: vec![(
                    QuotaSubject {
                        id: "alice".to_owned(),
                        issuer: Some("https://id.example".to_owned()),
                    },
                    QuotaLimits {
                        executions_per_minute: Some(120),
                        concurrent_executions: Some(2),
                        ..QuotaLimits::default()
                    },
                )],
                capabilities: Vec::new(),
            })
        );
        assert_eq!(quotas("listen = \"127.0.0.1:0\"\n"), Ok(Quotas::default()));
    }

    #[test]
    fn quotas_on_a_capabilitys_calls_are_read_beside_the_executions() {
        let text = r#"
[[quota]]
executions-per-minute = 30

[[quota]]
capability = "notes.write"
calls-per-day = 20

[[quota]]
capability = "notes.write"
subject = "alice"
calls-per-minute = 2
"#;
        assert_eq!(
            quotas(text),
            Ok(Quotas {
                defaults: QuotaLimits {
                    executions_per_minute: Some(30),
                    ..QuotaLimits::default()
                },
                subjects: Vec::new(),
                capabilities: vec![
                    CapabilityQuota {
                        capability: "notes.write".to_owned(),
                        subject: None,
                        limits: CallLimits {
                            calls_per_minute: None,
                            calls_per_day: Some(20),
                        },
                    },
                    CapabilityQuota {
                        capability: "notes.write".to_owned(),
                        subject: Some(QuotaSubject {
                            id: "alice".to_owned(),
                            issuer: None,
                        }),
                        limits: CallLimits {
                            calls_per_minute: Some(2),
                            calls_per_day: None,
                        },
                    },
                ],
            })
        );
    }

    #[test]
    fn a_bad_table_is_refused_saying_why() {
        let refusal = |text: &str| quotas(text).err().map(|(_, message)| message);
        assert_eq!(
            refusal("[[quota]]\nsubject = \"alice\"\n"),
            Some("[[quota]]: sets no quota; give one or more of concurrent-executions, executions-per-minute, native-calls-per-day, fuel-per-day (or a `capability` and calls-per-minute, calls-per-day)".to_owned())
        );
        assert_eq!(
            refusal("[[quota]]\nfuel-per-day = 0\n"),
            Some("[[quota]]: `fuel-per-day` must be at least 1 (to stop a subject, deny it in the policy)".to_owned())
        );
        assert_eq!(
            refusal("[[quota]]\nissuer = \"x\"\nfuel-per-day = 1\n"),
            Some(
                "[[quota]]: `issuer` needs a `subject`: the defaults are every subject's"
                    .to_owned()
            )
        );
        assert_eq!(
            refusal("[[quota]]\nfuel-per-day = 1\n[[quota]]\nfuel-per-day = 2\n"),
            Some("[[quota]]: a second table without `subject`: every subject's defaults are set once".to_owned())
        );
        assert_eq!(
            refusal(
                "[[quota]]\nsubject = \"a\"\nfuel-per-day = 1\n[[quota]]\nsubject = \"a\"\nfuel-per-day = 2\n"
            ),
            Some("[[quota]]: subject `a` has a table already".to_owned())
        );
        assert!(refusal("[[quota]]\nfuel-per-day = -1\n").is_some());
        assert_eq!(
            refusal("[[quota]]\ncalls-per-day = 5\n"),
            Some("[[quota]]: `calls-per-day` needs a `capability`: the capability whose calls it counts".to_owned())
        );
        assert_eq!(
            refusal("[[quota]]\ncapability = \"notes.write\"\n"),
            Some("[[quota]]: sets no quota on `notes.write`; give one or more of calls-per-minute, calls-per-day".to_owned())
        );
        assert_eq!(
            refusal("[[quota]]\ncapability = \"notes.write\"\ncalls-per-day = 5\nfuel-per-day = 9\n"),
            Some("[[quota]]: `fuel-per-day` is a quota of executions; a table with `capability` sets calls-per-minute, calls-per-day".to_owned())
        );
        assert_eq!(
            refusal("[[quota]]\ncapability = \"notes.write\"\ncalls-per-minute = 0\n"),
            Some("[[quota]]: `calls-per-minute` must be at least 1 (to stop a capability, deny it in the policy)".to_owned())
        );
        assert_eq!(
            refusal("[[quota]]\ncapability = \"\"\n"),
            Some("[[quota]]: `capability` is empty".to_owned())
        );
        assert_eq!(
            refusal("[[quota]]\ncapability = \"a.b\"\nissuer = \"x\"\ncalls-per-day = 1\n"),
            Some(
                "[[quota]]: `issuer` needs a `subject`: without one the table is every subject's"
                    .to_owned()
            )
        );
        assert_eq!(
            refusal("[[quota]]\ncapability = \"a.b\"\ncalls-per-day = 1\n[[quota]]\ncapability = \"a.b\"\ncalls-per-day = 2\n"),
            Some("[[quota]]: a second table for `a.b` without `subject`: every subject's quotas on it are set once".to_owned())
        );
        assert_eq!(
            refusal(
                "[[quota]]\ncapability = \"a.b\"\nsubject = \"al\"\ncalls-per-day = 1\n[[quota]]\ncapability = \"a.b\"\nsubject = \"al\"\ncalls-per-day = 2\n"
            ),
            Some("[[quota]]: subject `al` has a table for `a.b` already".to_owned())
        );
        let unknown = refusal("[[quota]]\nexecutions-per-hour = 1\n").unwrap_or_default();
        assert!(
            unknown.starts_with("[[quota]]: unknown field `executions-per-hour`"),
            "{unknown}"
        );
    }
}

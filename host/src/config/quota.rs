//! `[[quota]]` tables: how much each subject may run across executions and
//! replicas. A table without `subject` sets every subject's defaults; a table
//! with one sets that subject's own, the defaults filling in the rest.

use codemode_server::quota::{Quota, QuotaLimits, QuotaSubject, Quotas};
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
    executions_per_minute: Option<u64>,
    native_calls_per_day: Option<u64>,
    fuel_per_day: Option<u64>,
    concurrent_executions: Option<u64>,
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
        if limits.is_empty() {
            let keys: Vec<&str> = Quota::ALL.iter().map(|quota| quota.name()).collect();
            return Err(at(format!(
                "sets no quota; give one or more of {}",
                keys.join(", ")
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
            })
        );
        assert_eq!(quotas("listen = \"127.0.0.1:0\"\n"), Ok(Quotas::default()));
    }

    #[test]
    fn a_bad_table_is_refused_saying_why() {
        let refusal = |text: &str| quotas(text).err().map(|(_, message)| message);
        assert_eq!(
            refusal("[[quota]]\nsubject = \"alice\"\n"),
            Some("[[quota]]: sets no quota; give one or more of concurrent-executions, executions-per-minute, native-calls-per-day, fuel-per-day".to_owned())
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
        let unknown = refusal("[[quota]]\nexecutions-per-hour = 1\n").unwrap_or_default();
        assert!(
            unknown.starts_with("[[quota]]: unknown field `executions-per-hour`"),
            "{unknown}"
        );
    }
}

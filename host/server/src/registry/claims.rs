//! Who may serve a capability name or ID that several sources claim: one policy for
//! every kind of source.
//!
//! A source is refused when it claims what another provider reserves (a name under
//! an upstream's root, an ID under its prefix), or a name or ID another source
//! claims too: a source serving now keeps what it has and every newcomer claiming
//! it is refused; among newcomers (every source at start) none gets a contested
//! name silently, so all of them are refused. Every refusal is logged naming the
//! sources on both sides.

use std::collections::{BTreeMap, HashSet, btree_map};
use std::sync::Arc;

use crate::source::{CapabilitySource, Reserved};

/// One source up for the catalog, with the provider it came from.
pub(super) struct Candidate<'a> {
    /// The index of its provider.
    pub provider: usize,
    /// The source.
    pub source: &'a Arc<dyn CapabilitySource>,
}

/// Why each refused candidate (by index into `candidates`) may not serve. `reserved`
/// holds each provider's name and reservation, by provider index; `incumbents` the
/// labels of the sources serving now.
pub(super) fn refused(
    candidates: &[Candidate<'_>],
    reserved: &[(&str, &Reserved)],
    incumbents: &HashSet<String>,
) -> BTreeMap<usize, String> {
    let mut refused = BTreeMap::new();
    for (c, candidate) in candidates.iter().enumerate() {
        if let Some(reason) = reserved_claim(candidate, reserved) {
            tracing::error!(source = %candidate.source.label(), reason = %reason, "source refused");
            refused.insert(c, reason);
        }
    }
    contested(candidates, incumbents, refused)
}

/// Why `candidate` claims what another provider reserves; `None` when it does not.
fn reserved_claim(candidate: &Candidate<'_>, reserved: &[(&str, &Reserved)]) -> Option<String> {
    let others = || {
        reserved
            .iter()
            .enumerate()
            .filter(|&(p, _)| p != candidate.provider)
            .map(|(_, reserved)| *reserved)
    };
    candidate
        .source
        .capabilities()
        .iter()
        .find_map(|capability| {
            let id = capability.id.as_str();
            if let Some((holder, prefix)) = others()
                .flat_map(|(holder, r)| r.id_prefixes.iter().map(move |p| (holder, p)))
                .find(|(_, prefix)| id.starts_with(prefix.as_str()))
            {
                return Some(format!(
                    "capability ID `{id}` is under `{prefix}`, which only the configured {holder} uses"
                ));
            }
            let name = capability.name.as_str();
            let root = name.split('.').next().unwrap_or_default();
            others()
                .find(|(_, r)| r.roots.iter().any(|r| r == root))
                .map(|(holder, _)| {
                    format!(
                        "capability name `{name}` is under `{root}`, the root of the configured {holder}"
                    )
                })
        })
}

/// Adds to `refused` the candidates losing a claim on a capability name or ID
/// (see the module docs); those already refused claim nothing.
fn contested(
    candidates: &[Candidate<'_>],
    incumbents: &HashSet<String>,
    mut refused: BTreeMap<usize, String>,
) -> BTreeMap<usize, String> {
    let mut claims: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (c, candidate) in candidates.iter().enumerate() {
        if refused.contains_key(&c) {
            continue;
        }
        for capability in candidate.source.capabilities() {
            claims
                .entry(("name", capability.name.as_str()))
                .or_default()
                .push(c);
            claims
                .entry(("ID", capability.id.as_str()))
                .or_default()
                .push(c);
        }
    }
    let label = |c: usize| candidates[c].source.label();
    for ((kind, key), mut claimants) in claims {
        claimants.dedup();
        if claimants.len() < 2 {
            continue;
        }
        let holder = claimants
            .iter()
            .copied()
            .find(|&c| incumbents.contains(label(c)));
        match holder {
            Some(holder) => {
                for &c in claimants.iter().filter(|&&c| c != holder) {
                    if let btree_map::Entry::Vacant(entry) = refused.entry(c) {
                        let reason = format!(
                            "capability {kind} `{key}` is already served by {}",
                            label(holder)
                        );
                        tracing::warn!(
                            source = %label(c),
                            serving = %label(holder),
                            reason = %reason,
                            "source refused"
                        );
                        entry.insert(reason);
                    }
                }
            }
            None => {
                let labels: Vec<&str> = claimants.iter().map(|&c| label(c)).collect();
                for &c in &claimants {
                    if let btree_map::Entry::Vacant(entry) = refused.entry(c) {
                        let reason = format!(
                            "capability {kind} `{key}` is claimed by {}",
                            labels.join(" and ")
                        );
                        tracing::error!(
                            source = %label(c),
                            reason = %reason,
                            "source refused: no source gets a contested name"
                        );
                        entry.insert(reason);
                    }
                }
            }
        }
    }
    refused
}

//! The routes: what every slot's latest offer becomes, under the claim policy
//! ([`claims`](super::claims)): the catalog and the routes of one [`Snapshot`],
//! and what became of each provider's sources.

use std::collections::HashSet;
use std::sync::Arc;

use super::claims::{self, Candidate};
use super::slot::Slot;
use super::snapshot::{Snapshot, Starting};
use crate::catalog::{CatalogBuilder, SpecError};
use crate::execute::{Dispatch, Route};
use crate::source::{Assembly, CapabilitySource, Reserved, Skipped};

/// Builds the snapshot from the latest offer of every slot: the claim policy
/// ([`claims`]) with `incumbents` keeping what they serve, then each source's
/// capabilities added to the catalog as a group (a source that does not fit is
/// refused), then the routes of every enabled capability. With `strict`, a
/// `disabled` ID that names no capability is an error (start), unless it is under
/// an ID prefix a provider reserves (an upstream's `mcp:<name>/`: it may not be
/// up yet); otherwise it is ignored (later: the source that had it may be gone). Also returns what became
/// of each slot's sources.
pub(super) fn assemble(
    slots: &[Slot],
    incumbents: &HashSet<String>,
    disabled: &[String],
    strict: bool,
) -> Result<(Snapshot, Vec<Assembly>), SpecError> {
    let candidates: Vec<Candidate<'_>> = slots
        .iter()
        .enumerate()
        .flat_map(|(provider, slot)| {
            slot.offer
                .iter()
                .flat_map(|offer| &offer.sources)
                .map(move |source| Candidate { provider, source })
        })
        .collect();
    let reserved: Vec<(&str, &Reserved)> = slots
        .iter()
        .map(|slot| (slot.name.as_str(), &slot.reserved))
        .collect();
    let mut refused = claims::refused(&candidates, &reserved, incumbents);
    let mut builder = CatalogBuilder::new();
    let mut serving: Vec<Arc<dyn CapabilitySource>> = Vec::new();
    let mut refusals = Vec::new();
    let mut assemblies = vec![Assembly::default(); slots.len()];
    for (c, candidate) in candidates.iter().enumerate() {
        let source = candidate.source;
        let reason = match refused.remove(&c) {
            Some(reason) => Some(reason),
            None => {
                let capabilities = source.capabilities();
                builder.add(capabilities).err().map(|(index, error)| {
                    let name = capabilities.get(index).map_or("", |c| c.name.as_str());
                    let reason = format!("`{name}`: {error}");
                    tracing::error!(source = %source.label(), reason = %reason, "source refused: it does not fit the catalog");
                    reason
                })
            }
        };
        let assembly = &mut assemblies[candidate.provider];
        match reason {
            Some(reason) => {
                assembly.refused.push(source.label().to_owned());
                refusals.push(Skipped {
                    plugin: source.label().to_owned(),
                    reason,
                    earlier_serves: false,
                });
            }
            None => {
                assembly.serving += 1;
                serving.push(source.clone());
            }
        }
    }
    // An ID under a prefix a provider reserves (`mcp:git/`) is that provider's to
    // list, whether it serves now or not: checked when it lists (`warn_disabled`),
    // never against whether it is up.
    let reserved_id = |id: &str| {
        slots
            .iter()
            .flat_map(|slot| &slot.reserved.id_prefixes)
            .any(|prefix| id.starts_with(prefix.as_str()))
    };
    let disabled: Vec<String> = if strict {
        disabled
            .iter()
            .filter(|id| builder.has_id(id) || !reserved_id(id))
            .cloned()
            .collect()
    } else {
        disabled
            .iter()
            .filter(|id| builder.has_id(id))
            .cloned()
            .collect()
    };
    let catalog = builder.build(&disabled)?;
    let mut routes = Vec::new();
    for (s, source) in serving.iter().enumerate() {
        for (index, capability) in source.capabilities().iter().enumerate() {
            if catalog.get(capability.name.as_str()).is_some() {
                routes.push((
                    capability.name.to_string(),
                    Route::new(s, index, capability.clone()),
                ));
            }
        }
    }
    // The catalog holds each name once, so sorting by name alone is a total order.
    routes.sort_by(|(a, _), (b, _)| a.cmp(b));
    let (names, routes): (Vec<String>, Vec<Route>) = routes.into_iter().unzip();
    let mut skipped: Vec<Skipped> = slots
        .iter()
        .flat_map(|slot| {
            slot.offer
                .iter()
                .flat_map(|offer| offer.failures.iter().cloned())
        })
        .chain(refusals)
        .collect();
    skipped.sort_by(|a, b| a.plugin.cmp(&b.plugin));
    let starting = slots
        .iter()
        .filter(|slot| slot.offer.as_ref().is_some_and(|offer| offer.starting))
        .flat_map(|slot| {
            slot.reserved.roots.iter().map(|root| Starting {
                root: root.clone(),
                provider: slot.name.clone(),
            })
        })
        .collect();
    let capabilities = catalog.len();
    for assembly in &mut assemblies {
        assembly.capabilities = capabilities;
    }
    Ok((
        Snapshot {
            catalog: Arc::new(catalog),
            dispatch: Arc::new(Dispatch::new(names, routes, serving)),
            skipped,
            starting,
        },
        assemblies,
    ))
}

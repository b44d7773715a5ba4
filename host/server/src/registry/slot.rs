//! [`Slot`]: one provider's place in the registry, with its latest offer.

use std::sync::Arc;

use crate::source::{Offer, Provider, Reserved};

/// One provider's place in the registry.
pub(super) struct Slot {
    /// What its publisher names it by: a slot's position changes when another is
    /// removed, its key never.
    pub(super) key: u64,
    pub(super) provider: Arc<dyn Provider>,
    pub(super) name: String,
    pub(super) reserved: Reserved,
    /// Its latest offer; `None` until its first.
    pub(super) offer: Option<Offer>,
    /// Whether it offered a source yet: the disabled IDs under its reserved
    /// prefixes are checked against its first list.
    pub(super) listed: bool,
}

impl Slot {
    /// Warns about each of `disabled` under this slot's reserved ID prefixes that
    /// none of its sources has, the first time it offers a source.
    pub(super) fn warn_disabled(&mut self, disabled: &[String]) {
        let Some(offer) = self
            .offer
            .as_ref()
            .filter(|offer| !offer.sources.is_empty())
        else {
            return;
        };
        if std::mem::replace(&mut self.listed, true) {
            return;
        }
        for id in disabled.iter().filter(|id| {
            self.reserved
                .id_prefixes
                .iter()
                .any(|prefix| id.starts_with(prefix.as_str()))
        }) {
            let known = offer.sources.iter().any(|source| {
                source
                    .capabilities()
                    .iter()
                    .any(|capability| capability.id.as_str() == id.as_str())
            });
            if !known {
                tracing::warn!(provider = %self.name, id = %id, "a disabled capability ID names none of its tools");
            }
        }
    }
}

impl Slot {
    /// The slot of `provider`, under `key`, before its first offer.
    pub(super) fn new(key: u64, provider: Arc<dyn Provider>) -> Self {
        Self {
            key,
            name: provider.name().to_owned(),
            reserved: provider.reserved(),
            provider,
            offer: None,
            listed: false,
        }
    }
}

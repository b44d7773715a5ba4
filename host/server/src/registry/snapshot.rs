//! [`Snapshot`]: one set of sources as it serves, the catalog and the routes
//! together.

use std::sync::Arc;

use crate::catalog::Catalog;
use crate::execute::Dispatch;
use crate::source::Skipped;

/// One set of sources as it serves.
pub(crate) struct Snapshot {
    /// What searches and describes read.
    pub catalog: Arc<Catalog>,
    /// What executions call.
    pub dispatch: Arc<Dispatch>,
    /// Sources offered but left out, and sources their providers could not serve,
    /// by label.
    pub(super) skipped: Vec<Skipped>,
    /// The name roots of providers still starting ([`Offer::starting`]).
    pub(super) starting: Vec<Starting>,
}

/// A name root whose provider is still starting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Starting {
    /// The root (`git` of `git.git_log`).
    pub root: String,
    /// Its provider's name (`upstream git`).
    pub provider: String,
}

impl Snapshot {
    /// A snapshot serving `catalog` and `dispatch` (the same capabilities), with
    /// nothing skipped: for the tests of what reads one.
    #[cfg(test)]
    pub(crate) fn of(catalog: Catalog, dispatch: Dispatch) -> Self {
        Self {
            catalog: Arc::new(catalog),
            dispatch: Arc::new(dispatch),
            skipped: Vec::new(),
            starting: Vec::new(),
        }
    }

    /// The name roots whose providers are still starting.
    pub(crate) fn starting(&self) -> &[Starting] {
        &self.starting
    }

    /// Every source left out, by label.
    pub(crate) fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }
}

//! Per-subject catalogs: what one subject can find and call, when the policy
//! decides visibility (`--visibility-decision`).
//!
//! A subject's view is the serving snapshot with the capabilities it may not see
//! left out, exactly as if they were disabled: its own search index (so even the
//! ranking does not show what is hidden), its own names for `describe_api`, and
//! its own routes, so an execution neither lists, suggests nor calls a hidden
//! capability.
//!
//! Deciding a view costs one policy evaluation per capability, so views are
//! cached: per subject (its ID and the digest of its token's claims), for the
//! snapshot and the policy version they were decided under. A new snapshot (a
//! plugin or upstream changed) or a reloaded policy drops every view; subjects
//! that see the same capabilities share one view, so memory grows with the
//! number of distinct views, not of subjects. At most [`MAX_SUBJECTS`] subjects
//! are remembered; the one used least recently makes room.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::authz::{AuthorizationInput, Authorizer, AuthzError, Subject};
use crate::catalog::{Capability, Catalog};
use crate::execute::Dispatch;
use crate::registry::Snapshot;

/// Most subjects whose views are remembered at once: enough for every active
/// user of an organization, few enough that their keys stay small.
pub(crate) const MAX_SUBJECTS: usize = 4096;

/// Longest one view's decisions may take together (each is bounded by the
/// policy's own time limit): past it, the rest is hidden and the view is not
/// remembered.
pub(crate) const DECISION_DEADLINE: Duration = Duration::from_secs(10);

/// What one subject can find and call.
pub(crate) struct View {
    /// What its searches and describes read.
    pub catalog: Arc<Catalog>,
    /// What its executions call.
    pub dispatch: Arc<Dispatch>,
}

/// Who a view was decided for: the subject's ID and its token's digest.
type Key = (String, Option<[u8; 32]>);

/// The views decided so far, for one snapshot and one policy version.
#[derive(Default)]
pub(crate) struct Views {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The snapshot the views below were decided under (held weakly: a newer one
    /// serves once it is gone, and its address is never reused while held).
    snapshot: Weak<Snapshot>,
    /// The policy version they were decided under.
    version: u64,
    /// Each remembered subject's view, and when it was last used.
    subjects: HashMap<Key, (Arc<View>, u64)>,
    /// The views in use, by which capabilities they keep (one bit per capability,
    /// in the snapshot's order): subjects that see the same share one.
    shared: HashMap<Vec<bool>, Weak<View>>,
    /// Counts lookups: the last use of each subject.
    clock: u64,
}

impl State {
    /// Whether the views held were decided under `snapshot` and `version`.
    fn serves(&self, snapshot: &Arc<Snapshot>, version: u64) -> bool {
        self.version == version && std::ptr::eq(self.snapshot.as_ptr(), Arc::as_ptr(snapshot))
    }

    /// Forgets every view unless they were decided under `snapshot` and
    /// `version`.
    fn align(&mut self, snapshot: &Arc<Snapshot>, version: u64) {
        if !self.serves(snapshot, version) {
            self.snapshot = Arc::downgrade(snapshot);
            self.version = version;
            self.subjects.clear();
            self.shared.clear();
        }
    }
}

impl Views {
    /// `subject`'s view of `snapshot` under `authorizer`'s policy now, if it is
    /// remembered.
    pub(crate) fn remembered(
        &self,
        authorizer: &dyn Authorizer,
        snapshot: &Arc<Snapshot>,
        subject: &Subject,
    ) -> Option<Arc<View>> {
        let version = authorizer.version();
        let mut state = self.lock();
        state.align(snapshot, version);
        state.clock += 1;
        let now = state.clock;
        let (view, used) = state
            .subjects
            .get_mut(&(subject.id.clone(), subject.digest()))?;
        *used = now;
        Some(view.clone())
    }

    /// `subject`'s view of `snapshot` as `authorizer` decides it now. Decides it
    /// (one evaluation per capability) unless it is remembered.
    pub(crate) fn view(
        &self,
        authorizer: &dyn Authorizer,
        snapshot: &Arc<Snapshot>,
        subject: &Subject,
    ) -> Arc<View> {
        if let Some(view) = self.remembered(authorizer, snapshot, subject) {
            return view;
        }
        // Read before deciding: a policy replaced meanwhile bumps it after it is
        // in place, so a view is never kept under a version newer than its
        // decisions.
        let version = authorizer.version();
        let key: Key = (subject.id.clone(), subject.digest());
        let (keep, whole) = decide(authorizer, snapshot, subject, DECISION_DEADLINE);
        let shared = {
            let state = self.lock();
            state
                .serves(snapshot, version)
                .then(|| state.shared.get(&keep).and_then(Weak::upgrade))
                .flatten()
        };
        // Built without the lock: other subjects' lookups do not wait for it.
        let view = shared.unwrap_or_else(|| Arc::new(build(snapshot, &keep)));
        if !whole {
            // Decided in part: used for this request only, decided again at the next.
            return view;
        }
        let mut state = self.lock();
        if version < state.version {
            // A newer policy decided meanwhile: this view is not kept.
            return view;
        }
        state.align(snapshot, version);
        state.shared.retain(|_, view| view.strong_count() > 0);
        state
            .shared
            .entry(keep)
            .or_insert_with(|| Arc::downgrade(&view));
        if state.subjects.len() >= MAX_SUBJECTS && !state.subjects.contains_key(&key) {
            let oldest = state
                .subjects
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                state.subjects.remove(&oldest);
            }
        }
        let now = state.clock;
        state.subjects.insert(key, (view.clone(), now));
        view
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding it leaves at worst a stale view cache.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Which of `snapshot`'s capabilities (in its routes' order) `subject` may see,
/// and whether every one was decided within `deadline` (those after it are
/// hidden). A decision that fails hides its capability; the failures are logged
/// once per view, with the first reason.
fn decide(
    authorizer: &dyn Authorizer,
    snapshot: &Snapshot,
    subject: &Subject,
    deadline: Duration,
) -> (Vec<bool>, bool) {
    let started = Instant::now();
    let mut failed = 0_usize;
    let mut first_failure = None;
    let mut whole = true;
    let keep = snapshot
        .dispatch
        .capabilities()
        .map(|capability| {
            if whole && started.elapsed() >= deadline {
                whole = false;
                tracing::warn!(
                    subject = %subject.id,
                    deadline_s = deadline.as_secs(),
                    "visibility decisions took too long; the capabilities not yet decided are hidden from this request, and decided again at the next"
                );
            }
            if !whole {
                return false;
            }
            let input = AuthorizationInput {
                subject,
                capability_id: capability.id.as_str(),
                capability_name: capability.name.as_str(),
                arguments: &codemode_value::Value::None,
                annotations: &capability.annotations,
            };
            match authorizer.visible(&input) {
                Ok(visible) => visible,
                Err(AuthzError::Denied) => false,
                Err(AuthzError::Failure(reason)) => {
                    failed += 1;
                    if first_failure.is_none() {
                        first_failure = Some((capability.id.to_string(), reason));
                    }
                    false
                }
            }
        })
        .collect();
    if let Some((capability, reason)) = first_failure {
        tracing::warn!(
            subject = %subject.id,
            failed,
            capability = %capability,
            reason = %reason,
            "visibility decision failed; the capabilities it failed for are hidden from this subject"
        );
    }
    (keep, whole)
}

/// The view of `snapshot` keeping the capabilities `keep` marks.
fn build(snapshot: &Snapshot, keep: &[bool]) -> View {
    let kept: std::collections::HashSet<&str> = snapshot
        .dispatch
        .capabilities()
        .zip(keep)
        .filter(|(_, keep)| **keep)
        .map(|(capability, _)| capability.id.as_str())
        .collect();
    let keeps = |capability: &Capability| kept.contains(capability.id.as_str());
    View {
        catalog: Arc::new(snapshot.catalog.subset(keeps)),
        dispatch: Arc::new(snapshot.dispatch.subset(keeps)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use super::*;
    use crate::authz::Verdict;
    use crate::catalog::{CapabilitySpec, CatalogBuilder};
    use crate::execute::Route;

    /// Shows `public.*` to everyone and everything to `admin`; fails for
    /// `broken.*`; counts its decisions.
    #[derive(Debug, Default)]
    struct Fake {
        decided: AtomicUsize,
        version: AtomicU64,
    }

    impl Authorizer for Fake {
        fn authorize(&self, _: &AuthorizationInput<'_>) -> Result<Verdict, AuthzError> {
            Ok(Verdict::Allow)
        }

        fn visible(&self, input: &AuthorizationInput<'_>) -> Result<bool, AuthzError> {
            self.decided.fetch_add(1, Ordering::Relaxed);
            if input.capability_name.starts_with("broken.") {
                return Err(AuthzError::Failure("rego: no".to_owned()));
            }
            Ok(input.subject.id == "admin" || input.capability_name.starts_with("public."))
        }

        fn decides_visibility(&self) -> bool {
            true
        }

        fn version(&self) -> u64 {
            self.version.load(Ordering::Relaxed)
        }
    }

    impl Fake {
        fn decided(&self) -> usize {
            self.decided.load(Ordering::Relaxed)
        }
    }

    /// A snapshot of capabilities `names` (sorted), none of them callable.
    fn snapshot(names: &[&str]) -> Arc<Snapshot> {
        let specs: Vec<CapabilitySpec> = names
            .iter()
            .map(|name| CapabilitySpec {
                name: (*name).to_owned(),
                id: None,
                summary: format!("Does {name}."),
                description: None,
                search_terms: Vec::new(),
                params: Vec::new(),
                output: Vec::new(),
            })
            .collect();
        let mut builder = CatalogBuilder::new();
        builder.add_group(&specs).expect("valid specs");
        let catalog = builder.build(&[]).expect("a catalog");
        let routes: Vec<Route> = names
            .iter()
            .enumerate()
            .map(|(index, name)| {
                Route::new(0, index, catalog.get(name).expect("in the catalog").clone())
            })
            .collect();
        let dispatch = Dispatch::new(
            names.iter().map(|name| (*name).to_owned()).collect(),
            routes,
            Vec::new(),
        );
        Arc::new(Snapshot::of(catalog, dispatch))
    }

    fn token_subject(id: &str, group: &str) -> Subject {
        let mut claims = serde_json::Map::new();
        claims.insert("group".into(), serde_json::json!(group));
        Subject::with_claims(id, claims, Vec::new())
    }

    const NAMES: [&str; 3] = ["broken.one", "public.read", "secret.write"];

    #[test]
    fn a_view_leaves_out_what_its_subject_may_not_see_everywhere() {
        let fake = Fake::default();
        let views = Views::default();
        let snapshot = snapshot(&NAMES);
        let bob = views.view(&fake, &snapshot, &Subject::new("bob"));
        assert_eq!(bob.dispatch.names(), ["public.read"]);
        assert_eq!(bob.catalog.len(), 1);
        assert!(bob.catalog.describe("secret.write").is_none());
        assert!(bob.catalog.describe("public.read").is_some());
        let found: Vec<String> = bob
            .catalog
            .search("does")
            .expect("a search")
            .results
            .into_iter()
            .map(|result| result.name)
            .collect();
        assert_eq!(found, ["public.read"]);
        // A failed decision hides its capability, from the admin too.
        let admin = views.view(&fake, &snapshot, &Subject::new("admin"));
        assert_eq!(admin.dispatch.names(), ["public.read", "secret.write"]);
        assert_eq!(fake.decided(), 6);
    }

    #[test]
    fn views_are_remembered_per_subject_and_token_and_shared_when_equal() {
        let fake = Fake::default();
        let views = Views::default();
        let snapshot = snapshot(&NAMES);
        let bob = views.view(&fake, &snapshot, &Subject::new("bob"));
        let again = views.view(&fake, &snapshot, &Subject::new("bob"));
        assert!(Arc::ptr_eq(&bob, &again));
        assert_eq!(fake.decided(), 3, "decided once");
        // Another subject seeing the same shares the view, decided for it anew.
        let carol = views.view(&fake, &snapshot, &Subject::new("carol"));
        assert!(Arc::ptr_eq(&bob, &carol));
        assert_eq!(fake.decided(), 6);
        // The same ID with other claims is decided anew; the same claims are not.
        let first = token_subject("bob", "a");
        views.view(&fake, &snapshot, &first);
        views.view(&fake, &snapshot, &token_subject("bob", "a"));
        assert_eq!(fake.decided(), 9);
        views.view(&fake, &snapshot, &token_subject("bob", "b"));
        assert_eq!(fake.decided(), 12);
        assert!(
            views
                .remembered(&fake, &snapshot, &Subject::new("bob"))
                .is_some()
        );
        assert!(
            views
                .remembered(&fake, &snapshot, &Subject::new("dave"))
                .is_none()
        );
    }

    #[test]
    fn a_new_policy_version_or_snapshot_drops_every_view() {
        let fake = Fake::default();
        let views = Views::default();
        let first = snapshot(&NAMES);
        views.view(&fake, &first, &Subject::new("bob"));
        fake.version.store(1, Ordering::Relaxed);
        assert!(
            views
                .remembered(&fake, &first, &Subject::new("bob"))
                .is_none()
        );
        views.view(&fake, &first, &Subject::new("bob"));
        assert_eq!(fake.decided(), 6);
        let second = snapshot(&["public.read", "public.write"]);
        let bob = views.view(&fake, &second, &Subject::new("bob"));
        assert_eq!(bob.dispatch.names(), ["public.read", "public.write"]);
        assert_eq!(fake.decided(), 8);
        // The old snapshot's view is gone too.
        assert!(
            views
                .remembered(&fake, &first, &Subject::new("bob"))
                .is_none()
        );
    }

    #[test]
    fn decisions_past_their_deadline_hide_the_rest_and_say_so() {
        let fake = Fake::default();
        let snapshot = snapshot(&NAMES);
        let admin = Subject::new("admin");
        assert_eq!(
            decide(&fake, &snapshot, &admin, Duration::ZERO),
            (vec![false, false, false], false)
        );
        assert_eq!(fake.decided(), 0);
        assert_eq!(
            decide(&fake, &snapshot, &admin, DECISION_DEADLINE),
            (vec![false, true, true], true)
        );
    }

    #[test]
    fn the_subject_used_least_recently_makes_room() {
        let fake = Fake::default();
        let views = Views::default();
        let snapshot = snapshot(&["public.read"]);
        for i in 0..MAX_SUBJECTS {
            views.view(&fake, &snapshot, &Subject::new(format!("s{i}")));
        }
        // s0 is used again; s1 is now the one used least recently.
        assert!(
            views
                .remembered(&fake, &snapshot, &Subject::new("s0"))
                .is_some()
        );
        views.view(&fake, &snapshot, &Subject::new("new"));
        assert!(
            views
                .remembered(&fake, &snapshot, &Subject::new("s1"))
                .is_none()
        );
        assert!(
            views
                .remembered(&fake, &snapshot, &Subject::new("s0"))
                .is_some()
        );
        assert_eq!(views.lock().subjects.len(), MAX_SUBJECTS);
        // Every subject saw the same: one view is shared.
        assert_eq!(views.lock().shared.len(), 1);
    }
}

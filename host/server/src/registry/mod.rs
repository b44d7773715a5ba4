//! The registry of capability sources: it starts and stops the
//! [`Provider`]s (the plugins folder, each upstream MCP server), takes each
//! provider's offers, and assembles from all of them, with one claim policy
//! ([`claims`]), the catalog that searches and describes read and the routes
//! executions call. The two are built together and swapped in together as one
//! [`Snapshot`], so no request sees the catalog of one set and the routes of another;
//! an execution keeps the snapshot it started with.
//!
//! Nothing here knows which kind of source it holds: providers are kept in the
//! order they were given (that order only breaks ties in the log), each offer
//! replaces its provider's previous one. Providers may be added and removed while
//! serving (a reloaded config file's upstreams): a removed one's sources leave the
//! next catalog, an added one's enter with its first offer.

mod assemble;
mod claims;
mod slot;
mod snapshot;

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::catalog::{CatalogBuilder, SpecError};
use crate::execute::Dispatch;
use crate::metrics::Metrics;
use crate::source::{Accepted, Assembly, Offer, Provider, Publisher};

use assemble::assemble;
use slot::Slot;
pub(crate) use snapshot::Snapshot;

/// How long the first catalog waits for a provider's first offer; a provider
/// bounds its own start (an upstream's connection within 30 s), so this only
/// guards against one that never offers.
const FIRST_OFFER_TIMEOUT: Duration = Duration::from_secs(40);

/// How long a start that fails waits for the providers it started to stop (an
/// upstream closes its session within 8 s).
const FAILED_START_STOP: Duration = Duration::from_secs(10);

/// The providers and the snapshot assembled from their offers.
pub(crate) struct Registry {
    inner: Arc<Inner>,
}

/// What the registry and its providers' publishers share.
struct Inner {
    snapshot: ArcSwap<Snapshot>,
    state: Mutex<State>,
    /// Signalled on each offer before the first catalog.
    offered: Condvar,
    /// Told each time a new snapshot serves (what [`Registry::wait_started`]
    /// waits on).
    changed: tokio::sync::watch::Sender<()>,
    metrics: Arc<Metrics>,
}

/// The latest offer of each provider.
struct State {
    /// One per provider, in the order given (added ones last).
    slots: Vec<Slot>,
    /// Whether the first catalog serves: offers before it are held for it.
    serving: bool,
    /// The key of the next provider added.
    next_key: u64,
    /// Capability IDs left out of the catalog (`--disable`), sorted, each once.
    disabled: Vec<String>,
}

impl Registry {
    /// Starts every provider in `providers` and builds the first catalog from
    /// their first offers, leaving out the capability IDs in `disabled`.
    ///
    /// # Errors
    ///
    /// [`SpecError`] when the catalog cannot be built (a `disabled` ID names no
    /// capability); the providers are stopped then.
    pub(crate) fn start(
        providers: Vec<Arc<dyn Provider>>,
        mut disabled: Vec<String>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, SpecError> {
        let started = Instant::now();
        // Given twice is given once (and warned about once).
        disabled.sort();
        disabled.dedup();
        let inner = Arc::new(Inner {
            snapshot: ArcSwap::from_pointee(Snapshot {
                catalog: Arc::new(CatalogBuilder::new().build(&[])?),
                dispatch: Arc::new(Dispatch::default()),
                skipped: Vec::new(),
                starting: Vec::new(),
            }),
            state: Mutex::new(State {
                slots: providers
                    .iter()
                    .zip(0..)
                    .map(|(provider, key)| Slot::new(key, provider.clone()))
                    .collect(),
                serving: false,
                next_key: providers.len() as u64,
                disabled,
            }),
            offered: Condvar::new(),
            changed: tokio::sync::watch::Sender::new(()),
            metrics,
        });
        // Last first: see `Provider::start`.
        for (key, provider) in providers.iter().enumerate().rev() {
            provider.clone().start(publisher(&inner, key as u64));
        }
        // From the last start: a provider that works in `start` (the plugins
        // folder, compiling) takes none of the others' time.
        let deadline = Instant::now() + FIRST_OFFER_TIMEOUT;
        let mut state = inner.lock();
        while state.slots.iter().any(|slot| slot.offer.is_none()) {
            let now = Instant::now();
            if now >= deadline {
                for slot in state.slots.iter_mut().filter(|slot| slot.offer.is_none()) {
                    tracing::error!(provider = %slot.name, "no first offer in time; it serves nothing until it offers");
                    slot.offer = Some(Offer::default());
                }
                break;
            }
            state = inner
                .offered
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        let built = assemble(&state.slots, &HashSet::new(), &state.disabled, true);
        let (snapshot, assemblies) = match built {
            Ok((snapshot, assemblies)) => (Arc::new(snapshot), assemblies),
            Err(error) => {
                drop(state);
                Self { inner }.stop(Instant::now() + FAILED_START_STOP);
                return Err(error);
            }
        };
        state.serving = true;
        let State {
            slots, disabled, ..
        } = &mut *state;
        for slot in slots {
            slot.warn_disabled(disabled);
        }
        inner.snapshot.store(snapshot.clone());
        inner.changed.send_replace(());
        for (slot, assembly) in state.slots.iter().zip(&assemblies) {
            slot.provider.served(assembly, true);
        }
        inner.metrics.capabilities(snapshot.catalog.len());
        tracing::debug!(
            capabilities = snapshot.catalog.len(),
            build_us = started.elapsed().as_micros() as u64,
            "first catalog built"
        );
        drop(state);
        Ok(Self { inner })
    }

    /// The snapshot serving now.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.snapshot.load_full()
    }

    /// Waits until no provider of a root `wanted` accepts is still starting, at
    /// most until `deadline`.
    ///
    /// # Errors
    ///
    /// The name of a provider (`upstream git`) still starting at `deadline`.
    pub(crate) async fn wait_started(
        &self,
        wanted: impl Fn(&str) -> bool,
        deadline: Instant,
    ) -> Result<(), String> {
        // Subscribed before the snapshot is read: a change in between is seen.
        let mut changes = self.inner.changed.subscribe();
        loop {
            let snapshot = self.snapshot();
            let Some(waiting) = snapshot.starting.iter().find(|s| wanted(&s.root)) else {
                return Ok(());
            };
            let changed = tokio::time::timeout_at(
                tokio::time::Instant::from_std(deadline),
                changes.changed(),
            )
            .await;
            if !matches!(changed, Ok(Ok(()))) {
                return Err(waiting.provider.clone());
            }
        }
    }

    /// Stops every provider, waiting for them until `deadline` at most: all are
    /// asked first, so they stop together.
    pub(crate) fn stop(&self, deadline: Instant) {
        let providers: Vec<Arc<dyn Provider>> = self
            .inner
            .lock()
            .slots
            .iter()
            .map(|slot| slot.provider.clone())
            .collect();
        for provider in &providers {
            provider.stop(Instant::now());
        }
        for provider in &providers {
            provider.stop(deadline);
        }
    }

    /// Adds `provider` while serving and starts it: its sources enter the catalog
    /// with its first offer. Its name must not be one the registry holds.
    pub(crate) fn add(&self, provider: Arc<dyn Provider>) {
        let key = {
            let mut state = self.inner.lock();
            let key = state.next_key;
            state.next_key += 1;
            state.slots.push(Slot::new(key, provider.clone()));
            key
        };
        tracing::info!(provider = %provider.name(), "provider added");
        provider.start(publisher(&self.inner, key));
    }

    /// Removes the provider named `name` while serving: a catalog without its
    /// sources serves at once (executions under way finish on theirs), then the
    /// provider is stopped, waited for until `deadline` at most. `false` when no
    /// provider has that name.
    pub(crate) fn remove(&self, name: &str, deadline: Instant) -> bool {
        let removed = {
            let mut state = self.inner.lock();
            let Some(position) = state.slots.iter().position(|slot| slot.name == name) else {
                return false;
            };
            let slot = state.slots.remove(position);
            if state.serving {
                // Fewer sources always fit: a failure here is logged and the
                // last catalog (which still routes to the removed provider's
                // sources, whose calls then fail as unavailable) serves.
                let _ = self.inner.rebuild(&mut state, None);
            }
            slot.provider
        };
        tracing::info!(provider = %name, "provider removed");
        removed.stop(Instant::now());
        removed.stop(deadline);
        true
    }

    /// Replaces the provider named `name` by `provider` (of the same name), which
    /// is started: until its first offer, the old one's sources keep their names
    /// and their reservations (their calls fail as the stopped provider's do), so
    /// a restart never makes the names vanish or lets another claim them. The old
    /// provider is stopped, waited for until `deadline` at most. `false`, and
    /// nothing started, when no provider has that name.
    pub(crate) fn replace(
        &self,
        name: &str,
        provider: Arc<dyn Provider>,
        deadline: Instant,
    ) -> bool {
        let (key, old) = {
            let mut state = self.inner.lock();
            let key = state.next_key;
            let Some(slot) = state.slots.iter_mut().find(|slot| slot.name == name) else {
                return false;
            };
            let old = std::mem::replace(&mut slot.provider, provider.clone());
            slot.key = key;
            slot.name = provider.name().to_owned();
            slot.reserved = provider.reserved();
            // The new one's first list is checked against the disabled IDs.
            slot.listed = false;
            state.next_key += 1;
            (key, old)
        };
        tracing::info!(provider = %name, "provider replaced");
        old.stop(Instant::now());
        provider.start(publisher(&self.inner, key));
        old.stop(deadline);
        true
    }

    /// Leaves out the capability IDs of `disabled` from now on, instead of the
    /// ones before: the catalog is rebuilt at once. An ID that names nothing is a
    /// WARN (one under a provider's reserved prefix is checked when it lists).
    ///
    /// # Errors
    ///
    /// When the catalog cannot be rebuilt; the last one serves, and the IDs
    /// before stay in force.
    pub(crate) fn set_disabled(&self, mut disabled: Vec<String>) -> Result<(), SpecError> {
        disabled.sort();
        disabled.dedup();
        let mut state = self.inner.lock();
        let before = std::mem::replace(&mut state.disabled, disabled);
        if state.serving
            && let Err(error) = self.inner.rebuild(&mut state, None)
        {
            state.disabled = before;
            return Err(error);
        }
        let State {
            slots, disabled, ..
        } = &mut *state;
        for id in disabled.iter() {
            let known = slots.iter().any(|slot| {
                slot.reserved
                    .id_prefixes
                    .iter()
                    .any(|prefix| id.starts_with(prefix.as_str()))
                    || slot
                        .offer
                        .iter()
                        .flat_map(|offer| &offer.sources)
                        .any(|source| {
                            source
                                .capabilities()
                                .iter()
                                .any(|capability| capability.id.as_str() == id.as_str())
                        })
            });
            if !known {
                tracing::warn!(id = %id, "a disabled capability ID names no capability");
            }
        }
        for slot in slots {
            slot.listed = false;
            slot.warn_disabled(disabled);
        }
        Ok(())
    }

    /// The names of the providers, in order.
    #[cfg(test)]
    pub(crate) fn provider_names(&self) -> Vec<String> {
        self.inner
            .lock()
            .slots
            .iter()
            .map(|slot| slot.name.clone())
            .collect()
    }
}

impl Drop for Registry {
    /// Asks every provider to stop; [`Registry::stop`] also waits.
    fn drop(&mut self) {
        self.stop(Instant::now());
    }
}

/// The publisher of the provider under `key`: each offer replaces its slot and,
/// once the first catalog serves, rebuilds the catalog; `Gone` once the registry
/// is, or the provider was removed.
fn publisher(inner: &Arc<Inner>, key: u64) -> Publisher {
    let inner: Weak<Inner> = Arc::downgrade(inner);
    Publisher::new(move |offer| match inner.upgrade() {
        Some(inner) => inner.accept(key, offer),
        None => Ok(Accepted::Gone),
    })
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the `offer` of the provider under `key` (see [`publisher`]).
    fn accept(&self, key: u64, offer: Offer) -> Result<Accepted, SpecError> {
        let mut state = self.lock();
        let Some(index) = state.slots.iter().position(|slot| slot.key == key) else {
            return Ok(Accepted::Gone);
        };
        // A provider that replaced another (a restarted upstream) keeps the old
        // one's sources, names and failing calls, until it knows its own.
        if offer.starting
            && state.slots[index]
                .offer
                .as_ref()
                .is_some_and(|old| !old.sources.is_empty())
        {
            return Ok(Accepted::Held);
        }
        state.slots[index].offer = Some(offer);
        if !state.serving {
            self.offered.notify_all();
            return Ok(Accepted::Held);
        }
        let assemblies = self.rebuild(&mut state, Some(index))?;
        Ok(Accepted::Serving(
            assemblies.into_iter().nth(index).unwrap_or_default(),
        ))
    }

    /// Builds the catalog from every slot's latest offer and swaps it in; tells
    /// each provider what became of its sources (`own`: the slot whose offer this
    /// is). Returns each slot's assembly.
    fn rebuild(&self, state: &mut State, own: Option<usize>) -> Result<Vec<Assembly>, SpecError> {
        let started = Instant::now();
        let incumbents: HashSet<String> = self
            .snapshot
            .load()
            .dispatch
            .sources()
            .iter()
            .map(|source| source.label().to_owned())
            .collect();
        let (snapshot, assemblies) = assemble(&state.slots, &incumbents, &state.disabled, false)
            .inspect_err(|error| {
                tracing::error!(reason = %error, "the catalog could not be rebuilt; the last one serves");
            })?;
        let capabilities = snapshot.catalog.len();
        let State {
            slots, disabled, ..
        } = &mut *state;
        if let Some(slot) = own.and_then(|index| slots.get_mut(index)) {
            slot.warn_disabled(disabled);
        }
        self.snapshot.store(Arc::new(snapshot));
        self.changed.send_replace(());
        self.metrics.capabilities(capabilities);
        for (p, (slot, assembly)) in state.slots.iter().zip(&assemblies).enumerate() {
            slot.provider.served(assembly, own == Some(p));
        }
        tracing::debug!(
            provider = %own.and_then(|index| state.slots.get(index)).map_or("-", |slot| slot.name.as_str()),
            capabilities,
            build_us = started.elapsed().as_micros() as u64,
            "catalog rebuilt"
        );
        Ok(assemblies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::snapshot::Starting;
    use crate::catalog::{Capability, CapabilitySpec, validate_spec};
    use crate::source::{
        Arguments, CallBudget, CallFailure, CallFuture, CapabilitySource, Reserved, Session,
    };

    /// A source serving `specs` under `label`; never called.
    struct FakeSource {
        label: String,
        capabilities: Vec<Arc<Capability>>,
    }

    /// The session of a [`FakeSource`]: every call fails.
    struct FakeSession;

    impl Session for FakeSession {
        fn call(&mut self, _: usize, _: Arguments, _: CallBudget) -> CallFuture<'_> {
            Box::pin(std::future::ready(Err(CallFailure::Internal)))
        }
    }

    impl CapabilitySource for FakeSource {
        fn label(&self) -> &str {
            &self.label
        }

        fn capabilities(&self) -> &[Arc<Capability>] {
            &self.capabilities
        }

        fn session(self: Arc<Self>, _: u64) -> Box<dyn Session> {
            Box::new(FakeSession)
        }
    }

    /// A source labelled `label` serving capabilities `names` (ID: `id:<name>`
    /// when the name starts with `!`, else the name).
    fn source(label: &str, names: &[&str]) -> Arc<dyn CapabilitySource> {
        Arc::new(FakeSource {
            label: label.to_owned(),
            capabilities: names
                .iter()
                .map(|name| CapabilitySpec {
                    name: name.trim_start_matches('!').to_owned(),
                    id: name
                        .strip_prefix('!')
                        .map(|name| format!("mcp:{}", name.replace('.', "/"))),
                    summary: "Does a thing.".to_owned(),
                    description: None,
                    search_terms: Vec::new(),
                    params: Vec::new(),
                    output: Vec::new(),
                })
                .map(|spec| Arc::new(validate_spec(&spec).unwrap()))
                .collect(),
        })
    }

    /// A provider whose first offer is `first`, made from a thread of its own;
    /// it records what it heard and how often it was asked to stop.
    struct FakeProvider {
        name: String,
        reserved: Reserved,
        first: Vec<Arc<dyn CapabilitySource>>,
        /// Whether its first offer is [`Offer::starting`] instead of `first`.
        starts: bool,
        publisher: Mutex<Option<Publisher>>,
        served: Mutex<Vec<(Assembly, bool)>>,
        stops: AtomicUsize,
        /// The thread of its first offer.
        thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    }

    /// A registry over the fake `providers`, with the capability IDs `disabled`.
    fn start(providers: &[&Arc<FakeProvider>], disabled: &[&str]) -> Result<Registry, SpecError> {
        let providers = providers
            .iter()
            .map(|provider| Arc::clone(provider) as Arc<dyn Provider>)
            .collect();
        let disabled = disabled.iter().map(|id| (*id).to_owned()).collect();
        Registry::start(providers, disabled, Arc::new(Metrics::default()))
    }

    fn provider(
        name: &str,
        reserved: Reserved,
        first: Vec<Arc<dyn CapabilitySource>>,
    ) -> Arc<FakeProvider> {
        Arc::new(FakeProvider {
            name: name.to_owned(),
            reserved,
            first,
            starts: false,
            publisher: Mutex::new(None),
            served: Mutex::new(Vec::new()),
            stops: AtomicUsize::new(0),
            thread: Mutex::new(None),
        })
    }

    impl FakeProvider {
        /// Waits for the thread of its first offer to end.
        fn join(&self) {
            if let Some(thread) = self.thread.lock().unwrap().take() {
                thread.join().unwrap();
            }
        }

        /// Offers `sources` as its next set.
        fn offer(&self, sources: Vec<Arc<dyn CapabilitySource>>) -> Result<Accepted, SpecError> {
            let publisher = self.publisher.lock().unwrap().clone().unwrap();
            publisher.offer(Offer {
                sources,
                failures: Vec::new(),
                starting: false,
            })
        }
    }

    impl Provider for FakeProvider {
        fn name(&self) -> &str {
            &self.name
        }

        fn reserved(&self) -> Reserved {
            self.reserved.clone()
        }

        fn start(self: Arc<Self>, publisher: Publisher) {
            *self.publisher.lock().unwrap() = Some(publisher.clone());
            let first = Offer {
                sources: self.first.clone(),
                failures: Vec::new(),
                starting: false,
            };
            let first = if self.starts {
                Offer::starting()
            } else {
                first
            };
            let thread = std::thread::spawn(move || {
                publisher.offer(first).unwrap();
            });
            *self.thread.lock().unwrap() = Some(thread);
        }

        fn served(&self, assembly: &Assembly, own: bool) {
            self.served.lock().unwrap().push((assembly.clone(), own));
        }

        fn stop(&self, _: Instant) {
            self.stops.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn upstream_reserves(name: &str) -> Reserved {
        Reserved::named(name, "mcp:")
    }

    fn names(registry: &Registry) -> Vec<String> {
        registry.snapshot().dispatch.names().to_vec()
    }

    fn skipped(registry: &Registry) -> Vec<(String, String)> {
        registry
            .snapshot()
            .skipped()
            .iter()
            .map(|s| (s.plugin.clone(), s.reason.clone()))
            .collect()
    }

    #[test]
    fn the_first_catalog_waits_for_every_first_offer_and_applies_one_claim_policy() {
        // `git` serves nothing yet (down) but keeps its root and ID prefix.
        let git = provider("upstream git", upstream_reserves("git"), Vec::new());
        let time = provider(
            "upstream time",
            upstream_reserves("time"),
            vec![source("upstream time", &["!time.now"])],
        );
        let plugins = provider(
            "plugins folder",
            Reserved::default(),
            vec![
                source("a.wasm", &["text.upper", "shared.x"]),
                source("b.wasm", &["shared.x"]),
                source("c.wasm", &["git.log"]),
                source("d.wasm", &["!git.status"]),
                source("e.wasm", &["stats.mean"]),
            ],
        );
        let registry = start(&[&git, &time, &plugins], &[]).unwrap();
        assert_eq!(names(&registry), ["stats.mean", "time.now"]);
        assert_eq!(
            skipped(&registry),
            [
                ("a.wasm".to_owned(), "capability ID `shared.x` is claimed by a.wasm and b.wasm".to_owned()),
                ("b.wasm".to_owned(), "capability ID `shared.x` is claimed by a.wasm and b.wasm".to_owned()),
                (
                    "c.wasm".to_owned(),
                    "capability name `git.log` is under `git`, the root of the configured upstream git".to_owned()
                ),
                (
                    "d.wasm".to_owned(),
                    "capability ID `mcp:git/status` is under `mcp:git/`, which only the configured upstream git uses".to_owned()
                ),
            ]
        );
        let refused: Vec<String> = ["a.wasm", "b.wasm", "c.wasm", "d.wasm"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            *plugins.served.lock().unwrap(),
            [(
                Assembly {
                    serving: 1,
                    refused,
                    capabilities: 2
                },
                true
            )]
        );
        assert_eq!(
            *time.served.lock().unwrap(),
            [(
                Assembly {
                    serving: 1,
                    refused: Vec::new(),
                    capabilities: 2
                },
                true
            )]
        );
    }

    #[test]
    fn providers_added_and_removed_while_serving_enter_and_leave_the_catalog() {
        let time = provider(
            "upstream time",
            upstream_reserves("time"),
            vec![source("upstream time", &["!time.now"])],
        );
        let plugins = provider(
            "plugins folder",
            Reserved::default(),
            vec![source("records.wasm", &["records.find"])],
        );
        let registry = start(&[&plugins, &time], &[]).unwrap();
        assert_eq!(names(&registry), ["records.find", "time.now"]);
        // Added: its first offer rebuilds the catalog.
        let git = provider(
            "upstream git",
            upstream_reserves("git"),
            vec![source("upstream git", &["!git.log"])],
        );
        registry.add(git.clone());
        git.join();
        assert_eq!(names(&registry), ["git.log", "records.find", "time.now"]);
        assert_eq!(
            registry.provider_names(),
            ["plugins folder", "upstream time", "upstream git"]
        );
        // Removed: its names leave at once, it is asked to stop and waited for,
        // and an offer it still makes reaches nobody.
        assert!(registry.remove("upstream time", Instant::now()));
        assert_eq!(names(&registry), ["git.log", "records.find"]);
        assert_eq!(time.stops.load(Ordering::SeqCst), 2);
        assert_eq!(time.offer(Vec::new()), Ok(Accepted::Gone));
        assert!(!registry.remove("upstream time", Instant::now()));
        // The others' offers still land in their own slots.
        assert!(matches!(
            git.offer(vec![source("upstream git", &["!git.log", "!git.status"])]),
            Ok(Accepted::Serving(Assembly { serving: 1, .. }))
        ));
        assert_eq!(names(&registry), ["git.log", "git.status", "records.find"]);
        assert_eq!(
            registry.provider_names(),
            ["plugins folder", "upstream git"]
        );
        // Replaced: the old one is stopped and its offers reach nobody; the new
        // one's first offer serves.
        let git2 = provider(
            "upstream git",
            upstream_reserves("git"),
            vec![source("upstream git", &["!git.log", "!git.diff"])],
        );
        assert!(registry.replace("upstream git", git2.clone(), Instant::now()));
        git2.join();
        assert_eq!(git.stops.load(Ordering::SeqCst), 2);
        assert_eq!(git.offer(Vec::new()), Ok(Accepted::Gone));
        assert_eq!(names(&registry), ["git.diff", "git.log", "records.find"]);
        assert!(!registry.replace("upstream nobody", git2.clone(), Instant::now()));
        // Disabled IDs change while serving, each rebuilding the catalog.
        registry
            .set_disabled(vec!["mcp:git/diff".to_owned(), "records.find".to_owned()])
            .unwrap();
        assert_eq!(names(&registry), ["git.log"]);
        registry.set_disabled(Vec::new()).unwrap();
        assert_eq!(names(&registry), ["git.diff", "git.log", "records.find"]);
    }

    #[test]
    fn a_later_offer_rebuilds_the_catalog_and_the_serving_source_keeps_its_names() {
        let git = provider("upstream git", upstream_reserves("git"), Vec::new());
        let plugins = provider(
            "plugins folder",
            Reserved::default(),
            vec![source("records.wasm", &["records.find"])],
        );
        let registry = start(&[&git, &plugins], &[]).unwrap();
        assert_eq!(names(&registry), ["records.find"]);
        // The upstream comes up: its names join the catalog.
        let accepted = git
            .offer(vec![source("upstream git", &["!git.log"])])
            .unwrap();
        assert_eq!(
            accepted,
            Accepted::Serving(Assembly {
                serving: 1,
                refused: Vec::new(),
                capabilities: 2
            })
        );
        assert_eq!(names(&registry), ["git.log", "records.find"]);
        assert_eq!(
            plugins.served.lock().unwrap().last().cloned(),
            Some((
                Assembly {
                    serving: 1,
                    refused: Vec::new(),
                    capabilities: 2
                },
                false
            )),
            "the plugins hear of the upstream's offer"
        );
        // A newcomer sorting first claims the serving plugin's name: refused.
        let accepted = plugins
            .offer(vec![
                source("arecords.wasm", &["records.find"]),
                source("records.wasm", &["records.find"]),
            ])
            .unwrap();
        assert_eq!(
            accepted,
            Accepted::Serving(Assembly {
                serving: 1,
                refused: vec!["arecords.wasm".to_owned()],
                capabilities: 2
            })
        );
        assert_eq!(
            skipped(&registry),
            [(
                "arecords.wasm".to_owned(),
                "capability ID `records.find` is already served by records.wasm".to_owned()
            )]
        );
        // The upstream goes down: its names leave, the plugin's stay.
        git.offer(Vec::new()).unwrap();
        assert_eq!(names(&registry), ["records.find"]);
    }

    /// A provider whose first offer says it is still starting.
    fn starting_provider(name: &str, reserved: Reserved) -> Arc<FakeProvider> {
        Arc::new(FakeProvider {
            name: name.to_owned(),
            reserved,
            first: Vec::new(),
            starts: true,
            publisher: Mutex::new(None),
            served: Mutex::new(Vec::new()),
            stops: AtomicUsize::new(0),
            thread: Mutex::new(None),
        })
    }

    #[test]
    fn a_starting_provider_holds_its_roots_until_it_offers_and_a_replacement_keeps_the_old_sources()
    {
        let git = starting_provider("upstream git", upstream_reserves("git"));
        let registry = start(&[&git], &[]).unwrap();
        git.join();
        let starting = || registry.snapshot().starting().to_vec();
        assert_eq!(
            starting(),
            [Starting {
                root: "git".to_owned(),
                provider: "upstream git".to_owned()
            }]
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // Nobody waits for a root it does not name; a root it names is waited
        // for until the deadline, then named.
        let soon = Instant::now() + Duration::from_millis(50);
        assert_eq!(
            runtime.block_on(registry.wait_started(|root| root == "time", soon)),
            Ok(())
        );
        assert_eq!(
            runtime.block_on(registry.wait_started(|root| root == "git", soon)),
            Err("upstream git".to_owned())
        );
        // Its offer, made while one waits, ends the wait.
        let offering = std::thread::spawn({
            let git = git.clone();
            move || git.offer(vec![source("upstream git", &["!git.log"])])
        });
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(
            runtime.block_on(registry.wait_started(|root| root == "git", later)),
            Ok(())
        );
        offering.join().unwrap().unwrap();
        assert_eq!(names(&registry), ["git.log"]);
        assert_eq!(starting(), []);
        // A replacement's starting offer keeps the sources of the one it replaced.
        let restarted = starting_provider("upstream git", upstream_reserves("git"));
        assert!(registry.replace("upstream git", restarted.clone(), Instant::now()));
        restarted.join();
        assert_eq!(names(&registry), ["git.log"]);
        assert_eq!(starting(), []);
    }

    #[test]
    fn an_upstream_cannot_push_a_serving_plugin_past_the_catalogs_limits() {
        let plugins = provider(
            "plugins folder",
            Reserved::default(),
            vec![source("records.wasm", &["records.find"])],
        );
        let big = provider("upstream big", upstream_reserves("big"), Vec::new());
        let registry = start(&[&plugins, &big], &[]).unwrap();
        let tools: Vec<String> = (0..crate::catalog::MAX_CAPABILITIES)
            .map(|i| format!("!big.t{i}"))
            .collect();
        let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
        let accepted = big.offer(vec![source("upstream big", &tools)]).unwrap();
        assert_eq!(
            accepted,
            Accepted::Serving(Assembly {
                serving: 0,
                refused: vec!["upstream big".to_owned()],
                capabilities: 1
            })
        );
        assert_eq!(names(&registry), ["records.find"]);
        let last = crate::catalog::MAX_CAPABILITIES - 1;
        assert_eq!(
            skipped(&registry),
            [(
                "upstream big".to_owned(),
                format!("`big.t{last}`: {}", SpecError::TooManyCapabilities)
            )]
        );
    }

    #[test]
    fn a_disabled_id_of_an_upstream_waits_for_its_list() {
        let git = provider("upstream git", upstream_reserves("git"), Vec::new());
        // No upstream `nope`: its ID names nothing, at start already.
        let error = start(&[&git], &["mcp:git/log", "mcp:nope/x"]).err();
        assert_eq!(
            error,
            Some(SpecError::UnknownDisabled("mcp:nope/x".to_owned()))
        );
        // `git` is down at start: its ID is no error, and applies once it lists.
        let git = provider("upstream git", upstream_reserves("git"), Vec::new());
        let registry = start(&[&git], &["mcp:git/log"]).unwrap();
        assert_eq!(names(&registry), Vec::<String>::new());
        git.offer(vec![source("upstream git", &["!git.log", "!git.status"])])
            .unwrap();
        assert_eq!(names(&registry), ["git.status"]);
    }

    #[test]
    fn an_unknown_disabled_id_stops_the_start_and_a_gone_registry_takes_no_offer() {
        let plugins = provider(
            "plugins folder",
            Reserved::default(),
            vec![source("records.wasm", &["records.find"])],
        );
        let error = start(&[&plugins], &["records.nope"]).err();
        assert_eq!(
            error,
            Some(SpecError::UnknownDisabled("records.nope".to_owned()))
        );
        assert!(plugins.stops.load(Ordering::Relaxed) > 0);

        let plugins = provider(
            "plugins folder",
            Reserved::default(),
            vec![source("records.wasm", &["records.find", "records.list"])],
        );
        let registry = start(&[&plugins], &["records.list"]).unwrap();
        assert_eq!(names(&registry), ["records.find"]);
        // Later, a disabled ID that names nothing any more is no error.
        assert!(matches!(
            plugins.offer(Vec::new()),
            Ok(Accepted::Serving(_))
        ));
        assert_eq!(names(&registry), Vec::<String>::new());
        // Its first offer's thread may still hold the registry a moment.
        plugins.join();
        drop(registry);
        assert!(plugins.stops.load(Ordering::Relaxed) > 0);
        assert_eq!(
            plugins.offer(vec![source("records.wasm", &["records.find"])]),
            Ok(Accepted::Gone)
        );
    }
}

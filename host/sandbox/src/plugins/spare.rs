//! One fresh instance of each plugin in use, made ahead of time, so that an
//! execution's first call into the plugin does not wait for its instantiation.
//!
//! Every execution still gets an instance nobody called before: a spare is made
//! from the plugin's pre-instantiated component in a store of its own, handed to
//! exactly one execution, and replaced in the background once taken. What it cost
//! stays the execution's cost: the fuel its start code burned is charged to the
//! execution that takes it (a spare that burned more than that execution may spend
//! is dropped, and the execution instantiates as before, with the same outcome), and
//! it is made with that execution's memory cap.
//!
//! A componentize-py component spends about 0.5 ms instantiating (its shared
//! libraries fill one imported table through about 5,300 `ref.func`s, which the host
//! cannot avoid while every instance is new). A spare takes that off the first
//! call's path.
//!
//! Spares are made on one thread of their own, at the lowest CPU priority and with
//! their own deadline, so a plugin whose start code waits or loops stalls only the
//! making of spares, and making them never slows a running execution. A
//! plugin gets spares only after an execution instantiated it successfully; one
//! whose spare fails to be made (its start code trapped, ran out of fuel or time, a
//! granted directory is gone) gets none until it is loaded again.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::Instance;

use super::grants::Grants;
use super::output::Output;
use super::sandbox::{MemoryHit, PluginState};
use crate::wait::{Abandoned, Cancel, Stop};
use crate::worker::Worker;
use wasmtime::component::InstancePre;

/// How long a spare's start code may run, at most (a plugin's own `timeout` grant
/// when shorter): the making of spares waits for nothing longer.
const SPARE_START_TIME: Duration = Duration::from_secs(10);

/// A fresh instance, made ahead of time.
pub struct Spare {
    /// Its store, with the memory cap it was made with and its own stop installed.
    pub store: Store<PluginState>,
    /// The instance, never called.
    pub instance: Instance,
    /// Its stdout and stderr (start code may have written to them).
    pub output: Output,
    /// Fuel its start code burned.
    pub fuel: u64,
}

/// What an execution asks a spare to be made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpareTerms {
    /// The cap on each of its linear memories, in bytes.
    pub max_memory: usize,
    /// Fuel its start code may burn.
    pub fuel: u64,
}

/// A plugin's spare, and whether one should be made.
#[derive(Default)]
pub struct Spares {
    slot: Mutex<Slot>,
}

/// What a spare is made from: a loaded plugin (`load.rs` implements it, so that
/// spares need nothing of loading).
pub trait Template: Send + Sync + 'static {
    /// The plugin's file name, for the log.
    fn file(&self) -> &str;
    /// Its component, ready to instantiate.
    fn pre(&self) -> &InstancePre<PluginState>;
    /// What its sidecar grants.
    fn grants(&self) -> &Arc<Grants>;
    /// Where its spare is kept.
    fn spares(&self) -> &Spares;
}

/// Where a plugin's spare stands.
#[derive(Default)]
enum Slot {
    /// None yet: one is made after the plugin's first successful instantiation.
    #[default]
    Empty,
    /// Being made.
    Making,
    /// Ready to be taken, made with these terms.
    Ready(Box<Spare>, SpareTerms),
    /// Making one failed: none until the plugin is loaded again.
    Off,
}

impl Spares {
    /// Takes the spare if there is one made with `max_memory` as its memory cap.
    pub fn take(&self, max_memory: usize) -> Option<Spare> {
        let mut slot = self.lock();
        let taken = match std::mem::take(&mut *slot) {
            Slot::Ready(spare, terms) => (spare, terms),
            other @ (Slot::Empty | Slot::Making | Slot::Off) => {
                *slot = other;
                return None;
            }
        };
        drop(slot);
        match taken {
            (spare, terms) if terms.max_memory == max_memory => Some(*spare),
            // Made for another memory cap: not this execution's, and gone (dropped
            // here, not under the lock).
            _ => None,
        }
    }

    /// Has a spare made with `terms` in the background, unless one is ready or
    /// being made, or making one failed before.
    pub fn replenish(plugin: Arc<dyn Template>, terms: SpareTerms) {
        {
            let mut slot = plugin.spares().lock();
            match &*slot {
                Slot::Empty => *slot = Slot::Making,
                Slot::Making | Slot::Ready(..) | Slot::Off => return,
            }
        }
        static MAKER: OnceLock<Option<Worker<Request>>> = OnceLock::new();
        let maker = MAKER
            .get_or_init(|| Worker::start("codemode-spares", yield_to_executions, Request::fulfil));
        let request = Request { plugin, terms };
        let unsent = match maker {
            Some(maker) => maker.send(request),
            None => Err(request),
        };
        // No thread to make spares: this plugin gets none.
        if let Err(request) = unsent {
            *request.plugin.spares().lock() = Slot::Off;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A spare to make.
struct Request {
    plugin: Arc<dyn Template>,
    terms: SpareTerms,
}

impl Request {
    /// Makes the spare, on the spares thread, and puts it in its plugin's slot.
    fn fulfil(self) {
        let made = make(&*self.plugin, self.terms);
        let mut slot = self.plugin.spares().lock();
        *slot = match made {
            Ok(spare) => {
                tracing::debug!(plugin = %self.plugin.file(), "spare instance ready");
                Slot::Ready(Box::new(spare), self.terms)
            }
            // The server's capacity, not the plugin's: the next use asks again.
            Err(Unmade::Capacity) => {
                tracing::debug!(plugin = %self.plugin.file(), "no spare instance: the instance pool or --max-total-memory is full");
                Slot::Empty
            }
            Err(Unmade::Failed(reason)) => {
                tracing::info!(plugin = %self.plugin.file(), reason = %reason, "no spare instances for this plugin: making one failed; executions instantiate it themselves");
                Slot::Off
            }
        };
    }
}

/// Why no spare was made.
enum Unmade {
    /// Every slot of the instance pool is taken, or all of `--max-total-memory`
    /// (by executions): try again later.
    Capacity,
    /// Anything else, with the reason for the log: no spares for this plugin.
    Failed(String),
}

impl From<String> for Unmade {
    fn from(reason: String) -> Self {
        Unmade::Failed(reason)
    }
}

/// Instantiates `plugin` in a store of its own, on `terms`, within
/// [`SPARE_START_TIME`] (or the plugin's `timeout`), as an execution's call would
/// (outbound HTTP bounded by the same deadline).
fn make(plugin: &dyn Template, terms: SpareTerms) -> Result<Spare, Unmade> {
    let output = Output::default();
    let state = PluginState::new(plugin.file(), plugin.grants(), terms.max_memory, &output)?;
    let mut store = Store::new(plugin.pre().engine(), state);
    store.limiter(|s| &mut s.limits);
    store
        .set_fuel(terms.fuel)
        .map_err(|error| format!("{error:#}"))?;
    let time = plugin
        .grants()
        .timeout
        .map_or(SPARE_START_TIME, |t| t.min(SPARE_START_TIME));
    let deadline = Instant::now() + time;
    Stop::new(deadline, Arc::new(Cancel::default())).install(&mut store);
    store.data_mut().outbound.deadline = deadline;
    let instance = crate::wait::until(deadline, None, plugin.pre().instantiate_async(&mut store))
        .map_err(|abandoned| match abandoned {
            Abandoned::Deadline => format!("its start code ran past {} ms", time.as_millis()),
            // Nothing cancels a spare's wait.
            Abandoned::Cancelled => "its start code was cancelled".to_owned(),
            Abandoned::NoRuntime => "no runtime for host waits".to_owned(),
        })?
        .map_err(|error| {
            let pool_full = error
                .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some();
            if pool_full || store.data().limits.hit == Some(MemoryHit::Total) {
                Unmade::Capacity
            } else {
                Unmade::Failed(format!("{error:#}"))
            }
        })?;
    let left = store.get_fuel().map_err(|error| format!("{error:#}"))?;
    Ok(Spare {
        store,
        instance,
        output,
        fuel: terms.fuel.saturating_sub(left),
    })
}

/// Makes the calling thread (the spares thread) run only on CPU time executions
/// leave: on a small machine a spare made at full priority slows the execution
/// that runs beside it by more than the spare saves the next one. A spare that is
/// not ready in time costs nothing: the execution instantiates the plugin itself.
fn yield_to_executions() {
    #[cfg(target_os = "linux")]
    {
        // Linux keeps a nice value per thread; `who` = this thread's id.
        #[allow(unsafe_code)]
        // SAFETY: `gettid` and `setpriority` take plain integers and touch no memory of
        // ours.
        let failed = unsafe {
            let thread = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, SPARES_NICE) != 0
        };
        if failed {
            tracing::debug!(reason = %std::io::Error::last_os_error(), "cannot lower the priority of the spares thread");
        }
    }
}

/// The nice value of the spares thread: the lowest priority there is.
#[cfg(target_os = "linux")]
const SPARES_NICE: libc::c_int = 19;

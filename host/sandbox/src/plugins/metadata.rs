//! Calls a plugin's `codemode:plugin/metadata@0.1.0#describe` export once, and
//! its `codemode:plugin/annotations@0.1.0#annotate` when it has one, in a
//! throw-away instance with its own fuel and memory caps.

use wasmtime::component::{ComponentType, InstancePre, Lift};
use wasmtime::{Engine, Store};

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::output::Output;
use super::sandbox::PluginState;
use crate::wait::{self, Abandoned};

/// The metadata interface every plugin exports (DESIGN §3; the ABI).
pub const METADATA_INTERFACE: &str = "codemode:plugin/metadata@0.1.0";
/// Its one function.
const DESCRIBE: &str = "describe";
/// The optional interface of the capabilities' effect hints.
pub const ANNOTATIONS_INTERFACE: &str = "codemode:plugin/annotations@0.1.0";
/// Its one function.
const ANNOTATE: &str = "annotate";
/// Fuel for instantiating the plugin and running `describe()`: generous for an
/// interpreter-based component's start-up (a componentize-py instance start costs
/// well under this), small enough that a looping plugin is stopped in about a second.
const DESCRIBE_FUEL: u64 = 2_000_000_000;
/// Memory a plugin may use while describing itself.
const DESCRIBE_MEMORY: usize = 512 * 1024 * 1024;

/// One entry of `describe()`, as the WIT record `capability` defines it.
#[derive(ComponentType, Lift, Debug, Clone, PartialEq)]
#[component(record)]
pub struct MetadataEntry {
    #[component(name = "export-name")]
    pub export_name: String,
    pub name: Option<String>,
    pub id: Option<String>,
    pub summary: String,
    pub description: Option<String>,
    #[component(name = "search-terms")]
    pub search_terms: Vec<String>,
}

/// The WIT record `hints`: what a capability says of its effects.
#[derive(ComponentType, Lift, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[component(record)]
pub struct Hints {
    #[component(name = "read-only")]
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    #[component(name = "open-world")]
    pub open_world: Option<bool>,
}

/// One entry of `annotate()`, the WIT record `annotated`.
#[derive(ComponentType, Lift, Debug, Clone, PartialEq)]
#[component(record)]
pub struct Annotated {
    #[component(name = "export-name")]
    pub export_name: String,
    pub hints: Hints,
}

/// What a plugin says of itself: `describe()`, and `annotate()` (empty when
/// it does not export the interface; an error when its export is mistyped or
/// the call failed).
#[derive(Debug)]
pub struct Described {
    pub entries: Vec<MetadataEntry>,
    pub annotations: wasmtime::Result<Vec<Annotated>>,
}

/// Instantiates the plugin and returns what `describe()` (and `annotate()`)
/// return, abandoning both
/// after `timeout`: fuel stops a plugin computing, the timeout one waiting in a host
/// call (a sleep, a clock).
///
/// # Errors
///
/// Instantiation failures, a missing or mistyped `describe` export, traps (including
/// running out of fuel or memory), running past `timeout`.
pub fn describe(
    plugin: &str,
    engine: &Engine,
    pre: &InstancePre<PluginState>,
    timeout: Duration,
) -> wasmtime::Result<Described> {
    // `describe()` gets no grants: metadata needs nothing from outside.
    let output = Output::default();
    let state = PluginState::new(plugin, &Arc::default(), DESCRIBE_MEMORY, &output)
        .map_err(wasmtime::Error::msg)?;
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    store.set_fuel(DESCRIBE_FUEL)?;
    // No epoch ticker drives the loader's stores; fuel bounds this call.
    // Half the range: the deadline is added to the current epoch, which the ticker
    // has advanced by the time a reload loads plugins.
    store.set_epoch_deadline(u64::MAX / 2);
    let deadline = Instant::now() + timeout;
    let waited = wait::until(deadline, None, describe_async(&mut store, pre));
    output.emit(plugin, "describe()", None);
    match waited {
        Ok(described) => described,
        Err(Abandoned::Deadline) => Err(wasmtime::Error::msg(format!(
            "describe() did not return within {} ms (--load-timeout)",
            timeout.as_millis()
        ))),
        Err(Abandoned::Cancelled) => Err(wasmtime::Error::msg("describe() was cancelled")),
        Err(Abandoned::NoRuntime) => Err(wasmtime::Error::msg(
            "describe() could not be run: no runtime for host waits",
        )),
    }
}

async fn describe_async(
    store: &mut Store<PluginState>,
    pre: &InstancePre<PluginState>,
) -> wasmtime::Result<Described> {
    let instance = pre.instantiate_async(&mut *store).await?;
    let interface = instance
        .get_export_index(&mut *store, None, METADATA_INTERFACE)
        .ok_or_else(|| wasmtime::Error::msg(format!("missing export `{METADATA_INTERFACE}`")))?;
    let func = instance
        .get_export_index(&mut *store, Some(&interface), DESCRIBE)
        .ok_or_else(|| {
            wasmtime::Error::msg(format!(
                "missing function `{DESCRIBE}` in `{METADATA_INTERFACE}`"
            ))
        })?;
    let describe = instance.get_typed_func::<(), (Vec<MetadataEntry>,)>(&mut *store, &func)?;
    let (entries,) = describe.call_async(&mut *store, ()).await?;
    let Some(interface) = instance.get_export_index(&mut *store, None, ANNOTATIONS_INTERFACE)
    else {
        return Ok(Described {
            entries,
            annotations: Ok(Vec::new()),
        });
    };
    Ok(Described {
        entries,
        annotations: annotate(store, &instance, &interface).await,
    })
}

/// Calls the instance's `annotate()` export of `interface`.
async fn annotate(
    store: &mut Store<PluginState>,
    instance: &wasmtime::component::Instance,
    interface: &wasmtime::component::ComponentExportIndex,
) -> wasmtime::Result<Vec<Annotated>> {
    let func = instance
        .get_export_index(&mut *store, Some(interface), ANNOTATE)
        .ok_or_else(|| {
            wasmtime::Error::msg(format!(
                "missing function `{ANNOTATE}` in `{ANNOTATIONS_INTERFACE}`"
            ))
        })?;
    let annotate = instance.get_typed_func::<(), (Vec<Annotated>,)>(&mut *store, &func)?;
    let (annotations,) = annotate.call_async(&mut *store, ()).await?;
    Ok(annotations)
}

//! The sandboxed interpreter: the embedded `host/runner` component, pre-initialized
//! once (globals built, a warm-up program run) and cached as compiled code.
//!
//! Preparing it costs seconds (compile the 5 MB interpreter, run `init` under
//! wasmtime-wizer, compile the snapshot); the result is serialized to the cache
//! folder ([`ArtifactCache`]) under a key of the interpreter's bytes and the engine's
//! configuration, so a restart only maps the file. Every execution then instantiates the snapshot from
//! the pooling allocator with copy-on-write memory: a fresh interpreter in
//! microseconds, nothing shared with earlier executions.

use std::time::Instant;

use wasmtime::component::{
    Component, ComponentExportIndex, Instance, Lift, Linker, ResourceTable, WasmList,
};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wizer::Wizer;

use crate::cache::{ArtifactCache, Origin};

wasmtime::component::bindgen!({
    path: "../../wit/runner",
    world: "runner",
});

pub(crate) use exports::codemode::runner::program::{
    Exceeded, Failure, Limits as RunnerLimits, Outcome,
};

/// The interpreter as built by `build.rs` (starlark-rust for wasm32-wasip2).
const RUNNER_WASM: &[u8] = include_bytes!(env!("CODEMODE_RUNNER_WASM"));

/// The name of the interpreter's cache entries.
const RUNNER_PREFIX: &str = "runner";

/// The exported function wizer runs before taking the snapshot.
const INIT_FUNC: &str = "init";

/// Why the interpreter could not be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// Compiling, initializing or snapshotting the interpreter failed.
    #[error("cannot prepare the interpreter: {0:#}")]
    Prepare(wasmtime::Error),
}

/// Store data the import-free snapshot run needs: WASI, deny-by-default.
struct InitState {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for InitState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The compiled, pre-initialized interpreter, and how it was obtained.
pub(crate) struct Prepared {
    /// The snapshot, compiled for `engine`.
    pub component: Component,
    /// Whether it came from the cache.
    pub cached: bool,
    /// Time to obtain it.
    pub elapsed: std::time::Duration,
}

/// Loads the compiled snapshot from `cache`, or builds and stores it there.
///
/// # Errors
///
/// [`RunnerError::Prepare`] when the snapshot cannot be built or compiled.
pub(crate) fn prepare(
    engine: &Engine,
    cache: Option<&ArtifactCache>,
) -> Result<Prepared, RunnerError> {
    let started = Instant::now();
    let build = || Component::new(engine, snapshot(engine)?);
    let (component, cached) = match cache {
        Some(cache) => {
            let entry = cache.entry(engine, RUNNER_PREFIX, RUNNER_WASM);
            let (component, origin) = cache
                .component(engine, &entry, build)
                .map_err(RunnerError::Prepare)?;
            cache.retain_only(RUNNER_PREFIX, &entry);
            (component, origin == Origin::Cached)
        }
        None => (build().map_err(RunnerError::Prepare)?, false),
    };
    Ok(Prepared {
        component,
        cached,
        elapsed: started.elapsed(),
    })
}

/// Runs the interpreter's `init` under wizer and returns the pre-initialized
/// component.
fn snapshot(engine: &Engine) -> wasmtime::Result<Vec<u8>> {
    let mut wizer = Wizer::new();
    wizer.init_func(INIT_FUNC).keep_init_func(true);
    let (cx, instrumented) = wizer.instrument_component(RUNNER_WASM)?;
    let component = Component::new(engine, &instrumented)?;
    let mut linker: Linker<InitState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    // The interpreter calls no capability while initializing; these answer as for an
    // empty catalog.
    let mut host = linker.instance("codemode:runner/host@0.1.0")?;
    host.func_wrap("capabilities", |_, (_,): (Vec<String>,)| {
        Ok((Vec::<String>::new(),))
    })?;
    host.func_wrap("suggest", |_, (_,): (String,)| Ok((Vec::<String>::new(),)))?;
    host.func_wrap("call", |_, (_, _): (u32, Vec<u8>)| {
        Ok((Result::<Vec<u8>, ()>::Err(()),))
    })?;
    host.func_wrap("too-large", |_, (): ()| Ok(()))?;
    let mut store = Store::new(
        engine,
        InitState {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        },
    );
    store.set_fuel(u64::MAX)?;
    // Half the range: the deadline is added to the current epoch.
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = linker.instantiate(&mut store, &component)?;
    let init = instance.get_typed_func::<(), ()>(&mut store, INIT_FUNC)?;
    init.call(&mut store, ())?;
    let mut state = SnapshotState {
        store: &mut store,
        instance,
    };
    // Every await of wizer's snapshot over the synchronous accessors below is
    // complete at once; a thread-parking executor, not a runtime, is all it needs.
    futures::executor::block_on(wizer.snapshot_component(&cx, &mut state))
}

/// Gives wizer read access to the initialized instance's state.
struct SnapshotState<'a> {
    store: &'a mut Store<InitState>,
    instance: Instance,
}

impl SnapshotState<'_> {
    fn call<R: Lift + 'static>(&mut self, instance: &str, func: &str) -> wasmtime::Result<R> {
        let parent: ComponentExportIndex = self
            .instance
            .get_export_index(&mut *self.store, None, instance)
            .ok_or_else(|| wasmtime::format_err!("no export {instance}"))?;
        let index = self
            .instance
            .get_export_index(&mut *self.store, Some(&parent), func)
            .ok_or_else(|| wasmtime::format_err!("no export {instance}#{func}"))?;
        let func = self
            .instance
            .get_typed_func::<(), (R,)>(&mut *self.store, index)?;
        Ok(func.call(&mut *self.store, ())?.0)
    }
}

// Wizer's accessors cannot fail; an instrumented export that is missing or traps
// means wizer's own instrumentation is broken, where a panic is the honest outcome.
#[allow(clippy::expect_used)]
impl wasmtime_wizer::ComponentInstanceState for SnapshotState<'_> {
    async fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) {
        let list: WasmList<u8> = self
            .call(instance, func)
            .expect("wizer's instrumentation exports its accessors");
        contents(list.as_le_slice(&*self.store));
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call(instance, func)
            .expect("wizer's instrumentation exports its accessors")
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call(instance, func)
            .expect("wizer's instrumentation exports its accessors")
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call::<f32>(instance, func)
            .expect("wizer's instrumentation exports its accessors")
            .to_bits()
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call::<f64>(instance, func)
            .expect("wizer's instrumentation exports its accessors")
            .to_bits()
    }
}

//! The engine and the per-store state every plugin instance runs with.
//!
//! WASI 0.2 is linked deny-by-default: no preopens, no environment, no sockets, stdin
//! closed, stdout and stderr both sent to the host's stderr (stdout belongs to the MCP
//! protocol in stdio mode). Imports nobody provides are linked as traps, so a
//! component that imports more than it uses (componentize-js imports `wasi:http`)
//! still loads; only calling such an import fails.

use wasmtime::component::{Component, InstancePre, Linker, ResourceTable};
use wasmtime::{Config, Engine, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Builds the engine plugins (and later the runner) are compiled and run with: fuel
/// for deterministic budgets, epochs for wall time.
///
/// # Errors
///
/// When wasmtime rejects the configuration (not expected on supported hosts).
pub(crate) fn engine() -> wasmtime::Result<Engine> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.consume_fuel(true);
    config.epoch_interruption(true);
    Engine::new(&config)
}

/// The data of one plugin store.
pub(crate) struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    /// Memory and instance caps, installed as the store's limiter.
    pub limits: StoreLimits,
}

impl PluginState {
    /// Deny-by-default state whose linear memories may not grow past `max_memory`
    /// bytes each.
    pub(crate) fn new(max_memory: usize) -> Self {
        let wasi = WasiCtx::builder()
            .stdout(wasmtime_wasi::cli::stderr())
            .stderr(wasmtime_wasi::cli::stderr())
            .build();
        let limits = StoreLimitsBuilder::new()
            .memory_size(max_memory)
            .trap_on_grow_failure(true)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limits,
        }
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Links WASI (deny-by-default) and trapping stubs for every other import of
/// `component`, and pre-instantiates it.
///
/// # Errors
///
/// When an import cannot be satisfied even by a trap (a type mismatch with WASI).
pub(crate) fn pre_instantiate(
    engine: &Engine,
    component: &Component,
) -> wasmtime::Result<InstancePre<PluginState>> {
    let mut linker: Linker<PluginState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    linker.define_unknown_imports_as_traps(component)?;
    linker.instantiate_pre(component)
}

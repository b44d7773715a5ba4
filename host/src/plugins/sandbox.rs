//! The engine and the per-store state every plugin instance runs with.
//!
//! WASI 0.2 is linked deny-by-default: no preopens, no environment, no sockets, stdin
//! closed, stdout and stderr both sent to the host's stderr (stdout belongs to the MCP
//! protocol in stdio mode). Imports nobody provides are linked as traps, so a
//! component that imports more than it uses (componentize-js imports `wasi:http`)
//! still loads; only calling such an import fails.

use wasmtime::component::{Component, InstancePre, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter,
};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Instances the pool holds at once (the interpreter and the plugins of up to
/// `--max-concurrent-executions` executions, plus loading).
const POOL_INSTANCES: u32 = 1000;

/// Bytes of each memory and table slot kept resident between instances.
const KEEP_RESIDENT_BYTES: usize = 256 << 10;

/// Builds the one engine plugins and the interpreter are compiled and run with: fuel
/// for the per-execution ledger, epochs for wall time, and the pooling allocator, so
/// an instance is a few slot resets (copy-on-write memory images) rather than fresh
/// mappings.
///
/// # Errors
///
/// When wasmtime rejects the configuration (not expected on supported hosts).
pub(crate) fn engine() -> wasmtime::Result<Engine> {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(POOL_INSTANCES)
        .total_core_instances(POOL_INSTANCES * 4)
        .total_memories(POOL_INSTANCES)
        .total_tables(POOL_INSTANCES * 2)
        .max_memories_per_component(16)
        .max_tables_per_component(16)
        .max_core_instances_per_component(64)
        .max_core_instance_size(8 << 20)
        .max_component_instance_size(1 << 20)
        .table_elements(100_000)
        // Reset the first pages of a reused slot with memset instead of returning
        // them to the kernel: an execution touches them again right away, and
        // page faults plus TLB shootdowns cost more than the copy.
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES)
        .max_memory_size(crate::execute::MAX_MEMORY_BYTES);
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.consume_fuel(true);
    config.epoch_interruption(true);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config)
}

/// Caps every linear memory of one store and remembers whether a program hit the
/// cap, so that the trap that follows (an allocation failure aborts) is reported as a
/// resource limit.
#[derive(Debug)]
pub(crate) struct MemoryCap {
    max: usize,
    /// Whether a memory tried to grow past `max`.
    pub hit: bool,
}

impl MemoryCap {
    /// A cap of `max` bytes per linear memory.
    pub(crate) fn new(max: usize) -> Self {
        Self { max, hit: false }
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The data of one plugin store.
pub(crate) struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    /// The memory cap, installed as the store's limiter.
    pub limits: MemoryCap,
}

impl PluginState {
    /// Deny-by-default state whose linear memories may not grow past `max_memory`
    /// bytes each.
    pub(crate) fn new(max_memory: usize) -> Self {
        let wasi = WasiCtx::builder()
            .stdout(wasmtime_wasi::cli::stderr())
            .stderr(wasmtime_wasi::cli::stderr())
            .build();
        let limits = MemoryCap::new(max_memory);
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

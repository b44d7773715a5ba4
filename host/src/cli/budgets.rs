//! The budgets of executions, tasks and plugin loading (`--max-*`,
//! `--load-timeout`, `--task-store`, ...).

use std::time::Duration;

use super::values::{compile_memory, positive_duration, size, total_memory};

/// The budgets of an execution, a task and a plugin's loading.
#[derive(Debug, clap::Args)]
pub struct BudgetFlags {
    /// Largest program, in bytes [default: 64KiB]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_source_bytes: Option<usize>,

    /// Starlark steps per execution [default: 1000000]
    ///
    /// A step is one function call or one loop iteration.
    #[arg(long, value_name = "N")]
    pub max_execution_steps: Option<u64>,

    /// Wall time per execution, e.g. 5s or 500ms [default: 5s]
    ///
    /// Waiting for a free execution slot counts.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub max_execution_time: Option<Duration>,

    /// How long a request waits for a source still starting [default: 30s]
    ///
    /// An execute waits for the plugins to load (over stdio) and for the
    /// upstreams its program names to connect the first time; search_api waits
    /// for every upstream still connecting, describe_api for the name's. The
    /// wait is not part of --max-execution-time. A program naming an upstream
    /// that is still connecting after it fails with `capability failed:
    /// upstream NAME is still starting`; a program naming none runs at once.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub startup_wait: Option<Duration>,

    /// Native calls a program may attempt [default: 100]
    #[arg(long, value_name = "N")]
    pub max_native_calls: Option<u64>,

    /// Wall time of an execute run as a task, e.g. 5m [default: 5m]
    ///
    /// A 2026-07-28 client that declares the Tasks extension gets a task handle
    /// for its execute at once and asks for the result later; the execution then
    /// has this time budget instead of --max-execution-time.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub max_task_time: Option<Duration>,

    /// How long a finished task and its result are kept, e.g. 10m [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub task_ttl: Option<Duration>,

    /// Tasks kept at once; the oldest ended ones go first, a running one never
    /// [default: 1000]
    ///
    /// With --task-store, the number kept in Redis for all replicas together.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_tasks: Option<u64>,

    /// Keep tasks in Redis, shared by replicas: redis://[:PASSWORD@]HOST:PORT/N
    ///
    /// Without it tasks live in the Redis of --store when that is one, else in
    /// this server's memory. In Redis, any replica
    /// behind a load balancer answers status, result and cancel for a task
    /// another runs (a cancel reaches the running replica through Redis
    /// pub/sub); each task still runs on the replica that created it. While
    /// Redis does not answer (at start too), direct calls are served and
    /// requests about tasks fail with "Task store unavailable" (and answers to
    /// approvals, whose single use Redis records, with `permission denied`);
    /// finished results are written when it is back (within --task-ttl). TLS (rediss://)
    /// is not supported. Pass it as CODEMODE_TASK_STORE to keep the password
    /// off the command line.
    #[arg(long, value_name = "URL")]
    pub task_store: Option<String>,

    /// Nesting depth of any value crossing the sandbox [default: 32]
    ///
    /// A scalar is depth 1; each list or dict around it adds one.
    #[arg(long, value_name = "N")]
    pub max_value_depth: Option<usize>,

    /// Encoded size of any crossing value [default: 1MiB]
    ///
    /// Applies to each call's arguments, each result, and main's value.
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_value_bytes: Option<usize>,

    /// Sum of the results of one execution's calls [default: 8MiB]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_intermediate_value_bytes: Option<usize>,

    /// Executions running at once; more wait in line [default: 8]
    #[arg(long, value_name = "N")]
    pub max_concurrent_executions: Option<usize>,

    /// WebAssembly fuel per execution [default: 8000000000]
    ///
    /// One budget for the interpreter and every plugin it calls (about one unit
    /// per instruction).
    #[arg(long, value_name = "N")]
    pub max_fuel: Option<u64>,

    /// Memory of the interpreter, and of each plugin [default: 256MiB]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_memory: Option<usize>,

    /// Memory of all sandboxes together [default: half of this machine's]
    ///
    /// The interpreters and plugin instances of every running execution, and the
    /// spare instances kept ready, share it. A sandbox whose memory would grow
    /// past it fails, and its execution ends with `resource limit exceeded`
    /// (limit --max-total-memory), instead of the server being killed for memory
    /// when many executions run at once. The default is half of the machine's
    /// memory, or of its cgroup's memory.max where that is lower (at least 1GiB,
    /// and never below --max-memory). At least --max-memory, at most 1TiB.
    #[arg(long, value_name = "SIZE", value_parser = total_memory)]
    pub max_total_memory: Option<usize>,

    /// Largest plugin file loaded [default: 256MiB]
    ///
    /// Checked from the file's size before it is read; a larger one is skipped
    /// with the reason.
    #[arg(long, value_name = "SIZE", value_parser = size, global = true)]
    pub max_plugin_bytes: Option<usize>,

    /// Memory one plugin's compilation may use [default: 4GiB]
    ///
    /// Each plugin is compiled in a child process of its own, its heap capped at
    /// this and killed at --load-timeout; a plugin past either is skipped with
    /// the reason. At most 1TiB.
    #[arg(long, value_name = "SIZE", value_parser = compile_memory, global = true)]
    pub max_compile_memory: Option<u64>,

    /// Time to compile one plugin, and to describe it [default: 30s]
    ///
    /// A plugin past it is skipped with the reason; startup and reloading go on
    /// with the others. `precompile` and `check` allow 10m unless this is
    /// given: they run ahead of serving, where a slow compile costs no request.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, global = true)]
    pub load_timeout: Option<Duration>,
}

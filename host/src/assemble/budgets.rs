//! The budgets from the flags and the defaults: an execution's, a task's, a
//! pull's and a plugin's loading (and where plugins are compiled).

use std::path::{Path, PathBuf};
use std::time::Duration;

use codemode_server::tasks::TaskLimits;
use codemode_server::{Compiler, DEFAULT_COMPILE_MEMORY, Limits, LoadLimits};

use crate::cli::Cli;

/// How long `precompile` and `check` let one plugin compile when
/// `--load-timeout` is not given: they run ahead of serving (an image build, a
/// deploy step, a plugin author's build), where a slow compile costs nobody a
/// request.
pub const OFFLINE_LOAD_TIMEOUT: Duration = Duration::from_secs(600);

impl Cli {
    /// What executions run as tasks may take; half of
    /// `--max-concurrent-executions` run at once (direct calls keep the rest).
    pub fn task_limits(&self) -> TaskLimits {
        let d = TaskLimits::default();
        TaskLimits {
            max_running: (self.limits().max_concurrent_executions / 2).max(1),
            max_task_time: self.budgets.max_task_time.unwrap_or(d.max_task_time),
            ttl: self.budgets.task_ttl.unwrap_or(d.ttl),
            max_tasks: self
                .budgets
                .max_tasks
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(d.max_tasks),
            max_stored_bytes: d.max_stored_bytes,
        }
    }

    /// The execution budgets: the defaults with every flag given applied. Zero is
    /// rejected later, at startup ([`Limits::validate`]).
    pub fn limits(&self) -> Limits {
        let d = Limits::default();
        Limits {
            max_source_bytes: self.budgets.max_source_bytes.unwrap_or(d.max_source_bytes),
            max_execution_steps: self
                .budgets
                .max_execution_steps
                .unwrap_or(d.max_execution_steps),
            max_execution_time: self
                .budgets
                .max_execution_time
                .unwrap_or(d.max_execution_time),
            max_native_calls: self.budgets.max_native_calls.unwrap_or(d.max_native_calls),
            max_value_depth: self.budgets.max_value_depth.unwrap_or(d.max_value_depth),
            max_value_bytes: self.budgets.max_value_bytes.unwrap_or(d.max_value_bytes),
            max_intermediate_value_bytes: self
                .budgets
                .max_intermediate_value_bytes
                .unwrap_or(d.max_intermediate_value_bytes),
            max_concurrent_executions: self
                .budgets
                .max_concurrent_executions
                .unwrap_or(d.max_concurrent_executions),
            max_fuel: self.budgets.max_fuel.unwrap_or(d.max_fuel),
            max_memory_bytes: self.budgets.max_memory.unwrap_or(d.max_memory_bytes),
            // Unless given, never below --max-memory: a small machine's default
            // must not refuse the per-sandbox cap its operator chose.
            max_total_memory_bytes: self.budgets.max_total_memory.unwrap_or_else(|| {
                d.max_total_memory_bytes
                    .max(self.budgets.max_memory.unwrap_or(d.max_memory_bytes))
            }),
        }
    }

    /// The bounds of one pull (`--max-pull-bytes`, `--pull-timeout`).
    pub fn pull_limits(&self) -> codemode_server::oci::PullLimits {
        codemode_server::oci::PullLimits {
            max_bytes: self.pull.max_pull_bytes,
            timeout: self.pull.pull_timeout,
        }
    }

    /// What loading one plugin may cost in `precompile` and `check`: as
    /// [`Cli::loading`], but without `--load-timeout` compiling may take
    /// [`OFFLINE_LOAD_TIMEOUT`].
    pub fn offline_loading(&self) -> LoadLimits {
        LoadLimits {
            load_timeout: self.budgets.load_timeout.unwrap_or(OFFLINE_LOAD_TIMEOUT),
            ..self.loading()
        }
    }

    /// What loading one plugin may cost, from the flags and the defaults.
    pub fn loading(&self) -> LoadLimits {
        let d = LoadLimits::default();
        LoadLimits {
            max_plugin_bytes: self
                .budgets
                .max_plugin_bytes
                .map_or(d.max_plugin_bytes, |b| b as u64),
            load_timeout: self.budgets.load_timeout.unwrap_or(d.load_timeout),
            compiler: self.compiler(),
        }
    }

    /// Where plugins are compiled: in a child process of this binary, unless its
    /// path cannot be had (then on a thread, with a WARN).
    fn compiler(&self) -> Compiler {
        match compiler_program() {
            Ok(program) => Compiler::Child {
                program,
                max_memory: self
                    .budgets
                    .max_compile_memory
                    .unwrap_or(DEFAULT_COMPILE_MEMORY),
            },
            Err(error) => {
                tracing::warn!(reason = %error, "cannot find this binary's path; plugins are compiled in this process, their memory unbounded");
                Compiler::InProcess
            }
        }
    }
}

/// This binary, for its compiler processes: `/proc/self/exe` where there is one
/// (the running binary even after it was replaced or deleted on disk), else its
/// path.
pub(super) fn compiler_program() -> std::io::Result<PathBuf> {
    let own = Path::new("/proc/self/exe");
    if own.exists() {
        return Ok(own.to_owned());
    }
    std::env::current_exe()
}

//! Command-line flags: one definition each, whose doc comment is the help text.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::execute::{Limits, parse_bytes, parse_duration};

/// MCP server for code mode: capabilities from WebAssembly components
///
/// Agents get three tools: search_api, describe_api and execute (one Starlark
/// program calling many capabilities).
/// Drop plugin components (`*.wasm`) in a folder and point --plugins at it. The
/// server speaks MCP over stdio; logs go to stderr.
#[derive(Debug, Parser)]
#[command(name = "codemode-host", version)]
pub struct Cli {
    /// Folder of plugin components (*.wasm)
    ///
    /// Every `*.wasm` file directly in DIR (not in subfolders) is loaded as a plugin,
    /// in file-name order. A file that fails to load is logged with the reason and
    /// skipped; the others are served. Defaults to `./plugins`.
    #[arg(long, value_name = "DIR", default_value = "plugins")]
    pub plugins: PathBuf,

    /// Remove a capability by its stable ID (repeatable)
    ///
    /// The capability disappears from search_api, describe_api and execute. An ID
    /// that names no loaded capability stops startup with an error (fail closed), so
    /// a typo cannot leave a capability enabled.
    #[arg(long = "disable", value_name = "ID")]
    pub disable: Vec<String>,

    /// Log filter, e.g. `debug`
    ///
    /// Uses the tracing `EnvFilter` syntax; the RUST_LOG environment variable wins
    /// when set. Logs always go to stderr (stdout carries the MCP protocol).
    #[arg(long, value_name = "FILTER", default_value = "info")]
    pub log: String,

    /// Folder for the compiled interpreter
    ///
    /// The interpreter is compiled and pre-initialized once (seconds) and cached
    /// here, so later starts take milliseconds. Defaults to
    /// $XDG_CACHE_HOME/codemode-host or ~/.cache/codemode-host.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Largest program, in bytes [default: 64KiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_source_bytes: Option<usize>,

    /// Starlark steps per execution [default: 1000000]
    ///
    /// A step is one function call or one loop iteration.
    #[arg(long, value_name = "N")]
    pub max_execution_steps: Option<u64>,

    /// Wall time per execution, e.g. 5s or 500ms [default: 5s]
    ///
    /// Waiting for a free execution slot counts.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_execution_time: Option<Duration>,

    /// Native calls a program may attempt [default: 100]
    #[arg(long, value_name = "N")]
    pub max_native_calls: Option<u64>,

    /// Nesting depth of any value crossing the sandbox [default: 32]
    ///
    /// A scalar is depth 1; each list or dict around it adds one.
    #[arg(long, value_name = "N")]
    pub max_value_depth: Option<usize>,

    /// Encoded size of any crossing value [default: 1MiB]
    ///
    /// Applies to each call's arguments, each result, and main's value.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_value_bytes: Option<usize>,

    /// Sum of the results of one execution's calls [default: 8MiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
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
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_memory: Option<usize>,
}

impl Cli {
    /// The execution budgets: the defaults with every flag given applied. Zero is
    /// rejected later, at startup ([`Limits::validate`]).
    pub fn limits(&self) -> Limits {
        let d = Limits::default();
        Limits {
            max_source_bytes: self.max_source_bytes.unwrap_or(d.max_source_bytes),
            max_execution_steps: self.max_execution_steps.unwrap_or(d.max_execution_steps),
            max_execution_time: self.max_execution_time.unwrap_or(d.max_execution_time),
            max_native_calls: self.max_native_calls.unwrap_or(d.max_native_calls),
            max_value_depth: self.max_value_depth.unwrap_or(d.max_value_depth),
            max_value_bytes: self.max_value_bytes.unwrap_or(d.max_value_bytes),
            max_intermediate_value_bytes: self
                .max_intermediate_value_bytes
                .unwrap_or(d.max_intermediate_value_bytes),
            max_concurrent_executions: self
                .max_concurrent_executions
                .unwrap_or(d.max_concurrent_executions),
            max_fuel: self.max_fuel.unwrap_or(d.max_fuel),
            max_memory_bytes: self.max_memory.unwrap_or(d.max_memory_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn plugins_defaults_to_plugins_folder() -> anyhow::Result<()> {
        let cli = Cli::try_parse_from(["codemode-host"])?;
        assert_eq!(cli.plugins, PathBuf::from("plugins"));
        assert!(cli.disable.is_empty());
        assert_eq!(cli.log, "info");
        Ok(())
    }

    #[test]
    fn disable_repeats_and_keeps_order() -> anyhow::Result<()> {
        let cli = Cli::try_parse_from([
            "codemode-host",
            "--disable",
            "b.x",
            "--disable",
            "a.y",
            "--plugins",
            "p",
        ])?;
        assert_eq!(cli.disable, vec!["b.x".to_string(), "a.y".to_string()]);
        assert_eq!(cli.plugins, PathBuf::from("p"));
        Ok(())
    }

    #[test]
    fn limit_flags_override_defaults() -> anyhow::Result<()> {
        let cli = Cli::try_parse_from(["codemode-host"])?;
        assert_eq!(cli.limits(), Limits::default());
        let cli = Cli::try_parse_from([
            "codemode-host",
            "--max-execution-time",
            "250ms",
            "--max-value-bytes",
            "64KiB",
            "--max-native-calls",
            "3",
            "--max-memory",
            "64MiB",
        ])?;
        let limits = cli.limits();
        assert_eq!(limits.max_execution_time, Duration::from_millis(250));
        assert_eq!(limits.max_value_bytes, 65_536);
        assert_eq!(limits.max_native_calls, 3);
        assert_eq!(limits.max_memory_bytes, 64 << 20);
        assert_eq!(limits.max_execution_steps, 1_000_000);
        let error = Cli::try_parse_from(["codemode-host", "--max-execution-time", "5"])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("`5` needs a unit: ms, s, m or h (e.g. 5s)"),
            "{error}"
        );
        Ok(())
    }

    #[test]
    fn readme_flag_table_lists_every_flag() {
        let readme = include_str!("../../README.md");
        for arg in Cli::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            let value = arg
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| format!(" {v}"))
                .unwrap_or_default();
            let row = format!("| `--{long}{value}` |");
            assert!(readme.contains(&row), "README flag table lacks {row}");
        }
    }

    #[test]
    fn short_help_lines_fit_79_columns() {
        let help = Cli::command().render_help().to_string();
        for line in help.lines() {
            assert!(line.chars().count() <= 79, "too long: {line:?}");
        }
    }
}

//! The command line: every flag defined once, its doc comment the help text.
//! [`Cli`] holds what chooses what runs and where from; the flags of each
//! concern are a group of their own (`access.rs`, `net.rs`, `budgets.rs`,
//! `pull.rs`), flattened into it in the order `--help` shows. Turning flags into
//! the library's settings is `assemble/`'s job; the config file and the
//! environment are `config/`'s.

mod access;
mod budgets;
mod command;
mod net;
mod pull;
mod state;
#[cfg(test)]
mod tests;
mod values;

pub use access::AccessFlags;
pub use budgets::BudgetFlags;
pub use command::{Command, Lang, RegistryAccess};
pub use net::NetFlags;
pub use pull::PullFlags;
pub use state::StateFlags;

use std::path::PathBuf;

use clap::Parser;

use values::otlp_endpoint;

/// MCP server for code mode: capabilities from WebAssembly components
///
/// Agents get three tools: search_api, describe_api and execute (one Starlark
/// program calling many capabilities).
/// Drop plugin components (`*.wasm`) in a folder and point --plugins at it. The
/// server speaks MCP over stdio, or Streamable HTTP with --listen; logs go to
/// stderr.
///
/// Every flag can also be set by its environment variable (CODEMODE_ and the
/// flag's name, shown with each flag) or by a key in the --config file.
#[derive(Debug, Parser)]
#[command(name = "codemode-host", version, max_term_width = 79)]
pub struct Cli {
    /// What to do instead of serving
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Read settings from FILE (TOML); its keys are the long flag names
    ///
    /// For example `max-execution-time = "10s"`, `policy = ["authz.rego"]`,
    /// `allow-all = true`. Its tables add capability sources: `[[upstream]]`
    /// (MCP servers), `[[openapi]]` (services described by OpenAPI) and
    /// `[[plugin]]` (plugins pulled from OCI registries); the README shows each.
    /// A flag on the command line wins over its environment variable, which wins
    /// over the file, which wins over the default. Relative paths in the file are
    /// relative to the file's folder. An unknown key or a bad value stops
    /// startup, naming the key's line. Read again when it changes and on SIGHUP:
    /// the tables (every OpenAPI spec read again) and the budgets of one
    /// execution change while serving; other settings are logged as needing a
    /// restart.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,

    /// Folder of plugin components (*.wasm)
    ///
    /// Every `*.wasm` file directly in DIR (not in subfolders) is loaded as a plugin,
    /// in file-name order, with the grants of its sidecar `<plugin>.toml` if there
    /// is one (outbound hosts, env, config, dirs, per-plugin limits; see the
    /// README). A file that fails to load is logged with the reason and skipped; the
    /// others are served. The folder is watched: adding, replacing or removing a
    /// plugin or sidecar reloads the catalog while serving. Defaults to `./plugins`,
    /// which may then be missing when --config names upstream MCP servers or
    /// OpenAPI services.
    #[arg(long, value_name = "DIR", default_value = "plugins", global = true)]
    pub plugins: PathBuf,

    /// Do not watch the plugins folder
    ///
    /// Without it, changes to the folder are picked up while serving: a changed
    /// plugin that fails to load is logged and its last good version keeps serving.
    #[arg(long)]
    pub no_watch: bool,

    /// Refuse to serve unless every plugin file loads
    ///
    /// A plugin that fails to load, or is refused because another plugin claims
    /// its names, stops startup with every reason. Later, while such a file is in
    /// the folder, /readyz answers 503 naming it (the last good catalog keeps
    /// serving). Without this switch /readyz answers 200 and lists the files left
    /// out.
    #[arg(long)]
    pub require_all_plugins: bool,

    /// Remove a capability by its stable ID (repeatable)
    ///
    /// The capability disappears from search_api, describe_api and execute. An ID
    /// that names no loaded capability stops startup with an error (fail closed), so
    /// a typo cannot leave a capability enabled. An upstream tool's ID
    /// (mcp:<upstream>/<tool>) needs its upstream configured, not up: a tool it
    /// does not list is a WARN when it first lists its tools.
    #[arg(long = "disable", value_name = "ID")]
    pub disable: Vec<String>,

    // AccessFlags: their flags, in this place of the help.
    #[command(flatten)]
    pub access: AccessFlags,

    /// Export traces over OTLP (http/protobuf) to the receiver at URL
    ///
    /// One span per execute (subject, outcome, cost, the limit that fired) with a
    /// child span per native call (capability, ID, outcome, fuel, bytes; never
    /// arguments or results), a child of the client's span when the request
    /// carried W3C trace context (`traceparent` in `_meta` or, over HTTP, the
    /// header). URL is the receiver's base (`/v1/traces` is added), e.g.
    /// http://127.0.0.1:4318. The standard OTEL_EXPORTER_OTLP_ENDPOINT (and
    /// _TRACES_ENDPOINT, OTEL_SERVICE_NAME, OTEL_BSP_*) work too. Without either,
    /// nothing is exported and a request's trace context is passed on to
    /// upstreams as it came.
    #[arg(long, value_name = "URL", value_parser = otlp_endpoint)]
    pub otlp_endpoint: Option<String>,

    // NetFlags: their flags, in this place of the help.
    #[command(flatten)]
    pub net: NetFlags,

    /// Log filter, e.g. `debug`
    ///
    /// Uses the tracing `EnvFilter` syntax; the RUST_LOG environment variable wins
    /// when set. Logs always go to stderr (stdout carries the MCP protocol). The
    /// MCP library's per-session lines (over HTTP, three per request) show only
    /// when the filter names it, e.g. `info,rmcp=info`.
    #[arg(long, value_name = "FILTER", default_value = "info")]
    pub log: String,

    /// How log lines are written: `text`, or `json` for log shippers
    ///
    /// json: one object per line with `timestamp`, `level`, `target`, `message`
    /// and the line's fields (e.g. `plugin`, `reason`). Audit lines are JSON in
    /// either format and never have a `level`, which tells them apart where they
    /// share stderr (over stdio without --audit-log).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Folder for compiled components: the interpreter and the plugins
    ///
    /// The interpreter is compiled and pre-initialized once (seconds), each plugin
    /// compiled once, and cached here, so later starts take milliseconds. Entries
    /// are signed with a key kept in the folder: only what this host wrote is
    /// loaded. Defaults to $XDG_CACHE_HOME/codemode-host or
    /// ~/.cache/codemode-host.
    #[arg(long, value_name = "DIR", global = true)]
    pub cache_dir: Option<PathBuf>,

    // BudgetFlags: their flags, in this place of the help.
    #[command(flatten)]
    pub budgets: BudgetFlags,

    // StateFlags: their flags, in this place of the help.
    #[command(flatten)]
    pub state: StateFlags,

    // PullFlags: their flags, in this place of the help.
    #[command(flatten)]
    pub pull: PullFlags,

    /// The upstream MCP servers of the config file's `[[upstream]]` tables (no flag
    /// sets them).
    #[arg(skip)]
    pub upstreams: Vec<codemode_server::UpstreamConfig>,

    /// The services of the config file's `[[openapi]]` tables (no flag sets
    /// them).
    #[arg(skip)]
    pub openapi: Vec<codemode_server::OpenApiConfig>,

    /// The quotas of the config file's `[[quota]]` tables (no flag sets them).
    #[arg(skip)]
    pub quotas: codemode_server::quota::Quotas,

    /// The plugins of the config file's `[[plugin]]` tables, pulled from
    /// registries (no flag sets them).
    #[arg(skip)]
    pub plugin_entries: Vec<codemode_server::oci::PullEntry>,

    /// The `--key=value` arguments the config file gave (what a reload of it
    /// compares).
    #[arg(skip)]
    pub file_args: Vec<std::ffi::OsString>,

    /// Whether --plugins was given (flag, variable or file) rather than defaulted:
    /// a gateway of upstreams only needs no `./plugins`.
    #[arg(skip)]
    pub plugins_given: bool,
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-12-04T02:03:02.123456Z  INFO target: message key=value ...`.
    Text,
    /// One JSON object per line, the fields at the top level.
    Json,
}

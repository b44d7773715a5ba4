//! The `codemode-host` binary: parse flags, set up logging, load plugins, serve MCP.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use codemode_host::cli::Cli;
use codemode_host::execute::default_cache_dir;
use codemode_host::mcp::{McpServer, serve_stdio};
use codemode_host::{Service, ServiceConfig};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cli.log))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // stdout belongs to the MCP protocol: logs go to stderr, without colors so they
    // read well in client log files.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = ServiceConfig {
        limits: cli.limits(),
        cache_dir: cli.cache_dir.clone().or_else(default_cache_dir),
        plugins_dir: cli.plugins,
        disabled: cli.disable,
        // stdio serves one local user: every call is allowed (issue #4 adds policies).
        authorizer: None,
    };
    let service = Arc::new(Service::load(&config)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve_stdio(McpServer::new(service)))?;
    Ok(())
}

//! Compiling a plugin, bounded in time and memory.
//!
//! Cranelift's memory grows with a function's locals times its blocks (a 7 MB
//! component of one function with 50,000 locals and 411,540 blocks took 24 GB),
//! and a compilation cannot be interrupted: on a thread, one past `--load-timeout`
//! could only be left to finish. So the binary compiles each plugin in a child
//! process of its own ([`Compiler::Child`]: `codemode-host compile-plugin`, not in
//! `--help`), whose data is capped by `RLIMIT_DATA` (`--max-compile-memory`) and
//! which is killed at the load timeout. The child reads the component on its stdin
//! and writes wasmtime's artifact on its stdout; the parent loads it as the cache
//! loads its own entries (and stores it there). A library user compiles on a
//! thread ([`Compiler::InProcess`], the default): it owns its process and may not
//! want children.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::time::Duration;

use wasmtime::Engine;
use wasmtime::component::Component;

/// The binary's hidden subcommand that compiles one plugin ([`compile_child`]).
pub const COMPILE_COMMAND: &str = "compile-plugin";

/// Its one argument: the memory cap, in bytes.
pub const COMPILE_MEMORY_ARG: &str = "--max-memory";

/// The default of `--max-compile-memory`: the Python and JavaScript examples
/// (12-40 MB components) compile within about 1 GiB.
pub const DEFAULT_COMPILE_MEMORY: u64 = 4 << 30;

/// The most of a compiler's stderr kept for the reason.
const MAX_REASON_BYTES: usize = 4096;

/// Where plugins are compiled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compiler {
    /// On a thread of this process: past the load timeout the compilation is
    /// abandoned but runs on, and its memory is not bounded.
    #[default]
    InProcess,
    /// In a child process `program compile-plugin --max-memory N`, killed at the
    /// load timeout.
    Child {
        /// The `codemode-host` binary.
        program: PathBuf,
        /// The child's `RLIMIT_DATA`, in bytes.
        max_memory: u64,
    },
}

/// Why a compilation failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// wasmtime refused the component (its message).
    #[error("{0:#}")]
    Invalid(wasmtime::Error),
    /// It ran past the load timeout (and was killed, in a child).
    #[error("compiling took longer than {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The child ran out of its memory cap.
    #[error("compiling needed more than {} bytes of memory", .0)]
    Memory(u64),
}

/// Compiles `bytes` for `engine` with `compiler`, within `timeout`.
pub fn compile(
    engine: &Engine,
    bytes: &[u8],
    compiler: &Compiler,
    timeout: Duration,
) -> Result<Component, CompileError> {
    match compiler {
        Compiler::InProcess => on_a_thread(engine, bytes, timeout),
        Compiler::Child {
            program,
            max_memory,
        } => in_a_child(engine, bytes, program, *max_memory, timeout),
    }
}

/// Compiles `bytes` on a thread of its own and waits at most `timeout` for it.
/// Cranelift cannot be interrupted: past the deadline the compilation is left to
/// finish (its size is capped by `--max-plugin-bytes`) and its result dropped, so
/// that the loader (startup, the reload thread) moves on.
fn on_a_thread(
    engine: &Engine,
    bytes: &[u8],
    timeout: Duration,
) -> Result<Component, CompileError> {
    let (done, result) = sync_channel(1);
    let engine = engine.clone();
    let bytes = bytes.to_vec();
    std::thread::Builder::new()
        .name("codemode-compile".into())
        .spawn(move || {
            // The receiver is gone after a timeout; nobody wants the result then.
            let _ = done.send(Component::new(&engine, &bytes));
        })
        .map_err(|error| {
            CompileError::Invalid(wasmtime::Error::msg(format!(
                "cannot start compiling: {error}"
            )))
        })?;
    match result.recv_timeout(timeout) {
        Ok(compiled) => compiled.map_err(CompileError::Invalid),
        Err(_) => Err(CompileError::Timeout(timeout)),
    }
}

/// Compiles `bytes` in a child `program` (see the module's documentation).
fn in_a_child(
    engine: &Engine,
    bytes: &[u8],
    program: &Path,
    max_memory: u64,
    timeout: Duration,
) -> Result<Component, CompileError> {
    let cannot = |what: &str, error: std::io::Error| {
        CompileError::Invalid(wasmtime::Error::msg(format!(
            "cannot {what} the compiler process: {error}"
        )))
    };
    let mut command = Command::new(program);
    command
        .arg(COMPILE_COMMAND)
        .arg(COMPILE_MEMORY_ARG)
        .arg(max_memory.to_string())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // It dies with the server; this thread waits for it, so the death signal (tied
    // to the starting thread) cannot fire early.
    crate::children::prepare(&mut command);
    let mut child =
        crate::children::spawn_std(&mut command).map_err(|error| cannot("start", error))?;
    let ended = |child: &mut std::process::Child| {
        let _ = child.kill();
        let _ = child.wait();
    };
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        ended(&mut child);
        return Err(cannot("talk to", std::io::Error::other("no pipes")));
    };
    // Each pipe on a thread of its own: a child that stops reading (it died) or
    // fills one pipe while this one reads the other must not block past the
    // deadline.
    let component = bytes.to_vec();
    let writer = std::thread::Builder::new()
        .name("codemode-compile-in".into())
        .spawn(move || {
            let _ = stdin.write_all(&component);
        });
    let (sent, received) = sync_channel(1);
    // The artifact is read up to the child's own memory cap: more cannot be its.
    let reader = std::thread::Builder::new()
        .name("codemode-compile-out".into())
        .spawn(move || {
            let mut artifact = Vec::new();
            let read = stdout
                .take(max_memory)
                .read_to_end(&mut artifact)
                .map(|_| artifact);
            let _ = sent.send(read);
        });
    let errors = std::thread::Builder::new()
        .name("codemode-compile-err".into())
        .spawn(move || {
            let mut stderr = stderr;
            let mut reason = Vec::new();
            let _ = (&mut stderr)
                .take(MAX_REASON_BYTES as u64)
                .read_to_end(&mut reason);
            // The rest is drained, not kept, so the child never blocks on it.
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
            reason
        });
    let (writer, reader, errors) = match (writer, reader, errors) {
        (Ok(writer), Ok(reader), Ok(errors)) => (writer, reader, errors),
        (writer, reader, errors) => {
            ended(&mut child);
            let error = [writer.err(), reader.err(), errors.err()]
                .into_iter()
                .flatten()
                .next()
                .unwrap_or_else(|| std::io::Error::other("no thread"));
            return Err(cannot("read", error));
        }
    };
    let outcome = received.recv_timeout(timeout);
    if matches!(outcome, Err(RecvTimeoutError::Timeout)) {
        let _ = child.kill();
    }
    let status = child.wait();
    let _ = writer.join();
    let _ = reader.join();
    let reason = errors.join().unwrap_or_default();
    let artifact = match outcome {
        Ok(artifact) => artifact,
        Err(RecvTimeoutError::Timeout) => return Err(CompileError::Timeout(timeout)),
        Err(RecvTimeoutError::Disconnected) => {
            return Err(cannot("read", std::io::Error::other("the reader ended")));
        }
    };
    let reason = String::from_utf8_lossy(&reason).trim().to_owned();
    let status = status.map_err(|error| cannot("wait for", error))?;
    if !status.success() {
        return Err(failed(&status, &reason, max_memory));
    }
    let artifact = artifact.map_err(|error| cannot("read", error))?;
    trusted(engine, artifact).map_err(CompileError::Invalid)
}

/// What a child that did not succeed says: its own message (wasmtime refused the
/// component), or that it ran out of memory (Rust's allocation failure says so
/// before it aborts; a kernel out of memory sends SIGKILL instead).
fn failed(status: &std::process::ExitStatus, reason: &str, max_memory: u64) -> CompileError {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        let out_of_memory =
            reason.contains("memory allocation of") || status.signal() == Some(libc::SIGKILL);
        if out_of_memory {
            return CompileError::Memory(max_memory);
        }
    }
    let reason = if reason.is_empty() {
        format!("the compiler process failed ({status})")
    } else {
        reason.to_owned()
    };
    CompileError::Invalid(wasmtime::Error::msg(reason))
}

/// The component in `artifact`, which a child of this process compiled.
#[allow(unsafe_code)]
fn trusted(engine: &Engine, artifact: Vec<u8>) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize` trusts the bytes to be wasmtime's own output.
    // They are: this binary, run as a child by this process with a pipe only this
    // process holds, wrote them with `Engine::precompile_component` (what the
    // plugin's bytes can steer is the compiler, exactly as in this process); and
    // wasmtime still checks the header, version and engine settings.
    unsafe { Component::deserialize(engine, artifact) }
}

/// The child's side of [`Compiler::Child`]: caps this process's data at
/// `max_memory`, reads a component on stdin, compiles it for the engine plugins
/// are served with, and writes the artifact on stdout.
///
/// # Errors
///
/// Why it did not compile (the parent shows it as the plugin's reason).
pub fn compile_child(max_memory: u64) -> Result<(), String> {
    limit_data(max_memory).map_err(|error| format!("cannot cap the compiler's memory: {error}"))?;
    let mut component = Vec::new();
    std::io::stdin()
        .read_to_end(&mut component)
        .map_err(|error| format!("cannot read the component: {error}"))?;
    let engine = super::sandbox::compiling_engine().map_err(|error| format!("{error:#}"))?;
    let artifact = engine
        .precompile_component(&component)
        .map_err(|error| format!("{error:#}"))?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&artifact)
        .and_then(|()| stdout.flush())
        .map_err(|error| format!("cannot write the artifact: {error}"))
}

/// Caps this process's data (heap and private writable mappings) at `max` bytes.
/// `RLIMIT_DATA`, not `RLIMIT_AS`: the engine reserves address space it never
/// writes, which `RLIMIT_AS` would count.
#[allow(unsafe_code)]
fn limit_data(max: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let limit = libc::rlimit {
            rlim_cur: max as libc::rlim_t,
            rlim_max: max as libc::rlim_t,
        };
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_DATA, &raw const limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    #[cfg(not(unix))]
    let _ = max;
    Ok(())
}

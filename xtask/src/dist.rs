//! `cargo xtask dist`: the layout the container image ships (`Dockerfile`), built
//! here, and proof that the server starts from it the way a pod does.
//!
//! The layout: `bin/codemode-host`, `plugins/` (the example plugins and their
//! sidecars) and `cache/`, filled by `codemode-host precompile`. The check then
//! makes the cache read-only, owned by the image's user, and starts the server on
//! it as that user (through `setpriv` when this runs as root, as image builds do,
//! from a copy in a folder everyone may traverse): it must be ready within
//! [`START_LIMIT`] with nothing compiled and nothing written.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::test::Lints;
use crate::{cargo, plugins, root, status};

/// Where the binary goes in the layout (and in the image, under `/usr/local`).
pub(crate) const BINARY: &str = "bin/codemode-host";
/// The plugins folder of the layout (`/plugins` in the image).
pub(crate) const PLUGINS: &str = "plugins";
/// The precompiled cache of the layout (`/cache` in the image).
pub(crate) const CACHE: &str = "cache";
/// The image's user and group (distroless's `nonroot`, the manifests' runAsUser).
pub(crate) const USER: u32 = 65532;
/// How soon the server must be ready from the layout's cache.
const START_LIMIT: Duration = Duration::from_secs(1);
/// How long the check waits for a start that went wrong before it gives up.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// Which build the layout takes its binary from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Profile {
    /// `cargo xtask dist`: the release build, into `target/dist`.
    Release,
    /// The test command: the debug build the tests use, into `target/dist-debug`.
    Debug,
}

/// Builds the layout for `profile`, checks that the server starts from it, and
/// returns its folder.
pub(crate) fn dist(profile: Profile) -> Result<PathBuf> {
    let (build, binary, out) = match profile {
        Profile::Release => (
            vec!["build", "--release", "-p", "codemode-host"],
            "target/release/codemode-host",
            "target/dist",
        ),
        Profile::Debug => (
            vec!["build", "-p", "codemode-host"],
            "target/debug/codemode-host",
            "target/dist-debug",
        ),
    };
    status(cargo().args(&build))?;
    let binary = root().join(binary);
    let examples = plugins(&|| Ok(binary.clone()))?;
    let out = root().join(out);
    lay_out(&binary, &examples, &out)?;
    status(
        Command::new(out.join(BINARY))
            .arg("precompile")
            .arg("--plugins")
            .arg(out.join(PLUGINS))
            .arg("--cache-dir")
            .arg(out.join(CACHE)),
    )?;
    check(out)
}

/// The test command's layout, `target/dist-debug`: the debug `binary` its tests
/// built, the `examples`, and the artifacts of the `cache` it precompiled them
/// into (the same binary compiled the same files: nothing to compile again);
/// then the same check as [`dist`].
pub(crate) fn layout_debug(binary: &Path, examples: &Path, cache: &Path) -> Result<PathBuf> {
    let out = root().join("target/dist-debug");
    lay_out(binary, examples, &out)?;
    let into = out.join(CACHE);
    std::fs::create_dir_all(&into)?;
    for entry in std::fs::read_dir(cache).with_context(|| format!("list {}", cache.display()))? {
        let path = entry?.path();
        if path.is_file() {
            let name = path.file_name().context("a file name")?;
            std::fs::copy(&path, into.join(name))
                .with_context(|| format!("copy {}", path.display()))?;
        }
    }
    check(out)
}

/// Fails unless `cargo build -p PACKAGE` (with the test command's `lints`, as its
/// builds have) compiles nothing: the host's tests already built its binary, so
/// a unit built now means that the tests' build had other features (a
/// dev-dependency or another member turning on a feature of a dependency), and
/// every clean build compiles that unit and all that depends on it twice.
pub(crate) fn unchanged_build(lints: &Lints, package: &str) -> Result<()> {
    let built = build_reporting(lints, &["-p", package])?;
    if !built.is_empty() {
        bail!(
            "building {package} alone compiled again what the tests' build had compiled: {}. A dev-dependency or another member turns on a feature of a dependency that {package} alone does not (compare `cargo tree -e features -i CRATE` with and without `--workspace`); turn it on for {package} too",
            built.join(", ")
        );
    }
    Ok(())
}

/// Builds the server's library (`codemode-server`) without its default
/// features (what a library user who turns them off builds) and fails unless
/// that compiled the server alone: a dependency compiled again has other features without them (an
/// optional dependency turns them on), and every clean run would build it and
/// all above it twice.
pub(crate) fn library_alone(lints: &Lints) -> Result<()> {
    let args = ["-p", "codemode-server", "--lib", "--no-default-features"];
    let built = build_reporting(lints, &args)?;
    let others: Vec<&String> = built
        .iter()
        .filter(|unit| !unit.starts_with("codemode-server@"))
        .collect();
    if !others.is_empty() {
        bail!(
            "building the server's library without its default features compiled again: {}. An optional dependency turns on features of these when it is on (compare `cargo tree -p codemode-server -e features` with and without `--no-default-features`); turn them on in host/server/Cargo.toml's list of pins",
            others
                .iter()
                .map(|unit| unit.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// `cargo build ARGS` with `lints`: the units it compiled (not fresh), each as
/// `name@version`.
fn build_reporting(lints: &Lints, args: &[&str]) -> Result<Vec<String>> {
    let output = lints
        .apply(
            cargo()
                .args(["build", "--message-format", "json"])
                .args(args),
        )
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run cargo build {}", args.join(" ")))?;
    if !output.status.success() {
        bail!(
            "cargo build {} failed with {}",
            args.join(" "),
            output.status
        );
    }
    // One JSON message per line; an artifact built now says `"fresh":false`.
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| {
            line.contains("\"reason\":\"compiler-artifact\"") && line.contains("\"fresh\":false")
        })
        .filter_map(|line| {
            // `"package_id":"registry+https://...#name@1.2.3"`: the name and version.
            let id = line.split("\"package_id\":\"").nth(1)?.split('"').next()?;
            Some(id.rsplit('#').next().unwrap_or(id).to_owned())
        })
        .collect())
}

/// Puts the layout in `out`: `binary`, the plugin files of `examples`, and an
/// empty cache folder.
fn lay_out(binary: &Path, examples: &Path, out: &Path) -> Result<()> {
    if out.exists() {
        // The last check left the cache read-only.
        make_writable(out)?;
        std::fs::remove_dir_all(out).with_context(|| format!("remove {}", out.display()))?;
    }
    std::fs::create_dir_all(out.join("bin"))?;
    std::fs::copy(binary, out.join(BINARY))
        .with_context(|| format!("copy {}", binary.display()))?;
    std::fs::create_dir_all(out.join(PLUGINS))?;
    for entry in std::fs::read_dir(examples)? {
        let path = entry?.path();
        if path.is_file() {
            let name = path.file_name().context("a file name")?;
            std::fs::copy(&path, out.join(PLUGINS).join(name))?;
        }
    }
    std::fs::create_dir_all(out.join(CACHE))?;
    Ok(())
}

/// Makes the layout's cache read-only and checks that the server starts from it
/// (as the image's user when run as root) within [`START_LIMIT`].
fn check(out: PathBuf) -> Result<PathBuf> {
    let as_user = make_read_only(&out.join(CACHE))?;
    let ready = if as_user {
        // The image's user must reach the layout, but a checkout often sits in a
        // folder only root may enter (`mktemp -d` makes them 0700): the check runs
        // on a copy in a folder of its own that everyone may traverse.
        let copy = std::env::temp_dir().join(format!("codemode-dist-{}", std::process::id()));
        if copy.exists() {
            make_writable(&copy)?;
            std::fs::remove_dir_all(&copy)?;
        }
        std::fs::create_dir(&copy).with_context(|| format!("create {}", copy.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))?;
        }
        // cp -a keeps the cache's owner and modes.
        status(Command::new("cp").arg("-a").arg(out.join(".")).arg(&copy))?;
        let ready = start(&copy, true);
        make_writable(&copy)?;
        std::fs::remove_dir_all(&copy).with_context(|| format!("remove {}", copy.display()))?;
        ready?
    } else {
        start(&out, false)?
    };
    println!(
        "{}: ready in {} ms from a read-only cache{}",
        out.display(),
        ready.as_millis(),
        if as_user {
            format!(" (as uid {USER})")
        } else {
            String::new()
        }
    );
    if ready >= START_LIMIT {
        bail!(
            "the server took {} ms to be ready from {}, more than {} ms",
            ready.as_millis(),
            out.display(),
            START_LIMIT.as_millis()
        );
    }
    Ok(out)
}

/// Makes `cache` read-only (folders 0500, files 0400). Run as root, it also gives
/// it to [`USER`] and returns true: the start then runs as that user, for whom
/// the modes hold (root ignores them).
fn make_read_only(cache: &Path) -> Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let as_user = is_root();
    let mut folders = vec![cache.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            if path.is_dir() {
                folders.push(path);
            } else {
                if as_user {
                    std::os::unix::fs::chown(&path, Some(USER), Some(USER))?;
                }
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400))?;
            }
        }
        if as_user {
            std::os::unix::fs::chown(&folder, Some(USER), Some(USER))?;
        }
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o500))?;
    }
    Ok(as_user)
}

/// Gives back write permission under `dir`, so that it can be removed.
fn make_writable(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            if path.is_dir() && !path.is_symlink() {
                folders.push(path);
            }
        }
    }
    Ok(())
}

/// Whether this process runs as root.
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Starts the server from the layout `out` (as [`USER`] when `as_user`), waits for
/// `ready to serve`, stops it, and returns how long it took. Fails when anything
/// was compiled, a line is a warning or an error, or it does not get ready.
fn start(out: &Path, as_user: bool) -> Result<Duration> {
    let binary = out.join(BINARY);
    let mut command = if as_user {
        let mut command = Command::new("setpriv");
        command
            .arg(format!("--reuid={USER}"))
            .arg(format!("--regid={USER}"))
            .arg("--clear-groups")
            .arg(&binary);
        command
    } else {
        Command::new(&binary)
    };
    command
        .arg("--plugins")
        .arg(out.join(PLUGINS))
        .arg("--cache-dir")
        .arg(out.join(CACHE))
        .args(["--listen", "127.0.0.1:0", "--allow-all"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {}", binary.display()))?;
    let stderr = child.stderr.take().context("the server's stderr")?;
    let (lines, received) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let mut log = Vec::new();
    let outcome = loop {
        let left = START_DEADLINE.saturating_sub(started.elapsed());
        match received.recv_timeout(left) {
            Ok(line) => {
                let ready = line.ends_with("ready to serve");
                let wrong = line.contains("cached=false")
                    || line.contains(" WARN ")
                    || line.contains(" ERROR ");
                log.push(line);
                if wrong {
                    break Err("it compiled something or logged a problem");
                }
                if ready {
                    break Ok(started.elapsed());
                }
            }
            Err(RecvTimeoutError::Timeout) => break Err("it was not ready in time"),
            Err(RecvTimeoutError::Disconnected) => break Err("it exited"),
        }
    };
    // SIGTERM, as a pod gets; the server ends on its own.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let exit = child.wait()?;
    match outcome {
        Ok(ready) if exit.success() => Ok(ready),
        Ok(_) => bail!(
            "the server exited with {exit} after SIGTERM:\n{}",
            log.join("\n")
        ),
        Err(why) => bail!(
            "the server did not start cleanly from {}: {why}:\n{}",
            out.display(),
            log.join("\n")
        ),
    }
}

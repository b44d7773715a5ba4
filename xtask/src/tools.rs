//! The test command's `tools` phase: every tool of [`devtools::ALL`] in the
//! machine's tools folder (installed once per machine, keyed by version), and
//! the servers the tests start from the system's packages: `redis-server` and
//! `docker-registry` (the CNCF distribution registry).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, anyhow};
use devtools::{Kind, Tool};

use crate::status;

/// Installs what is missing: the crates one after another (each compiles on
/// every core), the Python and npm folders meanwhile, each on a thread of its
/// own (they mostly wait on the registries).
pub(crate) fn install_all() -> Result<()> {
    let nextest_on_path = nextest_on_path();
    let (crates, folders): (Vec<Tool>, Vec<Tool>) = devtools::ALL
        .iter()
        .copied()
        .filter(|tool| !(tool.name == devtools::CARGO_NEXTEST.name && nextest_on_path.is_some()))
        .partition(|tool| matches!(tool.kind, Kind::Cargo { .. }));
    std::thread::scope(|scope| {
        let threads: Vec<_> = folders
            .iter()
            .map(|tool| scope.spawn(move || tool.ensure().map(|_| ())))
            .collect();
        let mut failures: Vec<String> = crates
            .iter()
            .filter_map(|tool| tool.ensure().err())
            .collect();
        for thread in threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(error)) => failures.push(error),
                Err(_) => failures.push("an install thread panicked".to_owned()),
            }
        }
        match failures.is_empty() {
            true => Ok(()),
            false => Err(anyhow!(failures.join("\n"))),
        }
    })?;
    system_packages()
}

/// The pinned cargo-nextest: the one on the PATH when it is that release (this
/// kind of machine has it), else the tools folder's.
pub(crate) fn nextest() -> Result<PathBuf> {
    match nextest_on_path() {
        Some(path) => Ok(path),
        None => devtools::CARGO_NEXTEST
            .binary()
            .map_err(|error| anyhow!(error)),
    }
}

/// `cargo-nextest` on the PATH, when it is the pinned release.
fn nextest_on_path() -> Option<PathBuf> {
    let Kind::Cargo { version, .. } = devtools::CARGO_NEXTEST.kind else {
        return None;
    };
    let out = Command::new("cargo-nextest")
        .args(["nextest", "--version"])
        .output()
        .ok()?;
    // "cargo-nextest 0.9.143 (60fa45f63 2026-08-04)"
    let text = String::from_utf8_lossy(&out.stdout);
    let found = text.split_whitespace().nth(1)?;
    (out.status.success() && found == version).then(|| PathBuf::from("cargo-nextest"))
}

/// The Debian packages the tests start servers from: each program, its package,
/// and who needs it.
const SYSTEM_PACKAGES: [(&str, &str, &str); 2] = [
    ("redis-server", "redis-server", "the task store's tests"),
    (
        "docker-registry",
        "docker-registry",
        "the registry tests (`pull`)",
    ),
];

/// Installs the packages of [`SYSTEM_PACKAGES`] whose program is not on the
/// PATH (the tests start their own servers, on loopback ports).
fn system_packages() -> Result<()> {
    let missing: Vec<_> = SYSTEM_PACKAGES
        .iter()
        .filter(|(program, ..)| {
            // `docker-registry --version` and `redis-server --version` both
            // answer without starting anything.
            !Command::new(program)
                .arg("--version")
                .output()
                .is_ok_and(|out| out.status.success())
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().map(|(_, package, _)| *package).collect();
    let needed: Vec<&str> = missing.iter().map(|(.., who)| *who).collect();
    eprintln!(
        "xtask: installing {} (Debian packages) for {}",
        packages.join(", "),
        needed.join(" and ")
    );
    // As root (CI) apt-get runs as is; otherwise through sudo, without a prompt.
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0");
    let apt = |args: &[&str]| {
        let mut command = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        status(&mut command)
    };
    let mut install = vec!["install", "-y", "-qq", "--no-install-recommends"];
    install.extend(&packages);
    apt(&["update", "-qq"])
        .and_then(|()| apt(&install))
        .with_context(|| {
            format!(
                "{} need {}: install the Debian packages",
                needed.join(" and "),
                packages.join(", ")
            )
        })
}

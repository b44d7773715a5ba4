//! `cargo xtask deny`: cargo-deny over both dependency graphs, offline.
//!
//! cargo-deny expects its advisory database as a git checkout in a folder named
//! after the database URL's hash, and fetches it unless run with `--offline`. These
//! machines reach no git host, so the read-only snapshot beside the project
//! (`../shared/advisory-db`) is copied into `target/advisory-dbs` under that name and
//! committed there, and cargo-deny runs with `--offline` (which also keeps
//! `cargo metadata` offline, so the crates are fetched first).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{RUNNER_MANIFEST, cargo, root, status};

/// Where the advisory snapshot is unless `ADVISORY_DB_ENV` says otherwise.
const DEFAULT_ADVISORY_DB: &str = "../shared/advisory-db";
/// Names another copy of the advisory database.
const ADVISORY_DB_ENV: &str = "CODEMODE_ADVISORY_DB";
/// The folder cargo-deny looks for the default database (RustSec's advisory-db) in,
/// inside `db-path`: the URL's name and hash.
const ADVISORY_DB_FOLDER: &str = "advisory-db-3157b0e258782691";

/// Runs every check of deny.toml on the workspace's graph and on the interpreter's.
pub(crate) fn deny() -> Result<()> {
    let tool = install()?;
    let snapshot = std::env::var_os(ADVISORY_DB_ENV)
        .map_or_else(|| root().join(DEFAULT_ADVISORY_DB), PathBuf::from);
    prepare_database(
        &snapshot,
        &root().join("target/advisory-dbs").join(ADVISORY_DB_FOLDER),
    )?;
    for manifest in ["Cargo.toml", RUNNER_MANIFEST] {
        // `--offline` keeps `cargo metadata` offline too: every platform's crates
        // must be in the local registry first.
        status(cargo().args(["fetch", "--manifest-path", manifest]))?;
        status(
            Command::new(&tool)
                .current_dir(root())
                .args(["deny", "--offline", "--manifest-path", manifest])
                .arg("check"),
        )
        .with_context(|| format!("cargo deny found a problem in {manifest}'s dependencies"))?;
    }
    Ok(())
}

/// cargo-deny from the machine's tools folder, installed there first if missing.
fn install() -> Result<PathBuf> {
    devtools::CARGO_DENY
        .binary()
        .map_err(|error| anyhow::anyhow!(error))
}

/// Copies the snapshot to `into` as a one-commit git checkout, as cargo-deny reads
/// it; a copy of the same snapshot is left as it is. The commit carries the
/// snapshot's date (its SNAPSHOT.md names it), since cargo-deny judges a database's
/// age by its last commit: a fresh commit would make any snapshot look new.
fn prepare_database(snapshot: &Path, into: &Path) -> Result<()> {
    let stamp = std::fs::read(snapshot.join("SNAPSHOT.md")).with_context(|| {
        format!(
            "no advisory database at {} (a copy of RustSec's advisory-db with its SNAPSHOT.md; set {ADVISORY_DB_ENV} to use another)",
            snapshot.display()
        )
    })?;
    if std::fs::read(into.join("SNAPSHOT.md")).is_ok_and(|copied| copied == stamp)
        && into.join(".git").is_dir()
    {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&stamp);
    let date = snapshot_date(&text).with_context(|| {
        format!(
            "{} names no date (YYYY-MM-DD) of the snapshot",
            snapshot.join("SNAPSHOT.md").display()
        )
    })?;
    // Made beside `into` and renamed into place, so that an interrupted copy is
    // never taken for a finished one.
    let partial = into.with_extension("partial");
    for old in [&partial, &into.to_path_buf()] {
        if old.exists() {
            std::fs::remove_dir_all(old)
                .with_context(|| format!("cannot remove the old copy {}", old.display()))?;
        }
    }
    copy_tree(snapshot, &partial)?;
    let stamp_date = format!("{date}T00:00:00Z");
    let git = |args: &[&str]| {
        status(
            Command::new("git")
                .current_dir(&partial)
                .env("GIT_AUTHOR_DATE", &stamp_date)
                .env("GIT_COMMITTER_DATE", &stamp_date)
                .args(["-c", "user.name=xtask", "-c", "user.email=xtask@localhost"])
                .args(args),
        )
    };
    git(&["init", "--quiet"])?;
    git(&["add", "--all"])?;
    git(&["commit", "--quiet", "--no-gpg-sign", "-m", "snapshot"])?;
    std::fs::rename(&partial, into)
        .with_context(|| format!("cannot move the copy to {}", into.display()))?;
    Ok(())
}

/// The first date (`YYYY-MM-DD`) a SNAPSHOT.md names: the snapshot's.
fn snapshot_date(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    (0..bytes.len().saturating_sub(9)).find_map(|at| {
        let candidate = text.get(at..at + 10)?;
        let shape = candidate.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
        shape.then_some(candidate)
    })
}

/// Copies the files and folders under `from` to `to`, made writable (the snapshot
/// is read-only, and git must be able to replace the copy later).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot list {}", from.display()))?
    {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
            let mut permissions = std::fs::metadata(&target)?.permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            permissions.set_readonly(false);
            std::fs::set_permissions(&target, permissions)?;
        } else {
            bail!("{} is neither a file nor a folder", entry.path().display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::snapshot_date;

    #[test]
    fn the_snapshot_date_is_the_first_date_named() {
        assert_eq!(
            snapshot_date("A plain copy, commit bf5c0d2 (2026-08-21). On main as of 2026-12-05"),
            Some("2026-08-21")
        );
        assert_eq!(snapshot_date("no date here, 2026-8-21"), None);
        assert_eq!(snapshot_date(""), None);
    }
}

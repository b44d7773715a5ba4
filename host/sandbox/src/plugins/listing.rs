//! Which entries of the plugins folder are plugins, and the name a plugin is
//! known by.

use std::path::{Path, PathBuf};

/// The `.wasm` entries directly in `dir` that are not folders, sorted by file name
/// (so load order, and with it which of two conflicting plugins wins, is
/// deterministic). Entries that are not regular files (a FIFO, a socket, a device)
/// are listed too, so that loading skips them with the reason.
///
/// # Errors
///
/// When `dir` cannot be listed.
pub fn plugin_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") && !path.is_dir() {
            files.push(path);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// The name a plugin is known by in messages: its file name. Here, in a leaf of
/// the folder, because loading, grants and the folder all name plugins.
pub fn file_label(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

//! Reading files someone else may have put in place (plugins and their sidecars,
//! the config file, the tokens file, policy modules): regular files only, never
//! blocking on one, and never more than a cap.
//!
//! Anyone who can write to the plugins folder, or replace a secrets file, can put
//! there a FIFO named `x.toml` (opening it for reading waits for a writer forever:
//! startup or the reload thread would hang, and every later reload with it), a
//! device, or a sparse 3 GiB file (read whole before anything looked at it). So a
//! file is opened without blocking, checked on the open handle (the name may be
//! swapped between a check and an open), and its size is checked from its metadata
//! before a byte is read.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Why a file of the plugins folder was not read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It could not be opened or read.
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    /// It is not a regular file.
    #[error("not a regular file ({0}); only regular files are read")]
    NotRegular(&'static str),
    /// It is larger than the cap.
    #[error("{len} bytes, more than the {max} allowed ({setting})")]
    TooLarge {
        /// Its size.
        len: u64,
        /// The cap.
        max: u64,
        /// What sets the cap, for the operator.
        setting: &'static str,
    },
}

/// Reads the regular file at `path` whole as UTF-8 text, if it has at most `max`
/// bytes; `setting` names what sets `max` in the error.
///
/// # Errors
///
/// [`FileError`]; [`FileError::Io`] with `NotFound` when there is no such file, and
/// with `InvalidData` when it is not UTF-8.
pub fn read_text(path: &Path, max: u64, setting: &'static str) -> Result<String, FileError> {
    let bytes = read_regular(path, max, setting)?;
    String::from_utf8(bytes).map_err(|_| {
        FileError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it is not UTF-8 text",
        ))
    })
}

/// Reads the regular file at `path` whole, if it has at most `max` bytes; `setting`
/// names what sets `max` in the error.
///
/// # Errors
///
/// [`FileError`]; [`FileError::Io`] with `NotFound` when there is no such file.
pub fn read_regular(path: &Path, max: u64, setting: &'static str) -> Result<Vec<u8>, FileError> {
    let file = open_nonblocking(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(FileError::NotRegular(kind(&meta)));
    }
    if meta.len() > max {
        return Err(FileError::TooLarge {
            len: meta.len(),
            max,
            setting,
        });
    }
    // The file may grow after the check: read one byte past the cap at most.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(FileError::TooLarge {
            len: bytes.len() as u64,
            max,
            setting,
        });
    }
    Ok(bytes)
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // A FIFO opens at once instead of waiting for a writer; the flag does nothing to
    // reads of a regular file.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

/// What kind of file `meta` describes, for the message.
fn kind(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let file_type = meta.file_type();
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_block_device() || file_type.is_char_device() {
            return "a device";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(label: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("codemode-files-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the folder");
        dir
    }

    #[test]
    fn a_regular_file_within_the_cap_is_read_whole() {
        let dir = temp_dir("regular");
        let path = dir.join("a.toml");
        std::fs::write(&path, b"timeout = \"1s\"\n").expect("write");
        assert_eq!(
            read_regular(&path, 15, "cap").expect("read"),
            b"timeout = \"1s\"\n"
        );
        let error = read_regular(&path, 14, "--max-plugin-bytes").expect_err("too large");
        assert_eq!(
            error.to_string(),
            "15 bytes, more than the 14 allowed (--max-plugin-bytes)"
        );
        let missing = read_regular(&dir.join("none"), 10, "cap").expect_err("missing");
        assert!(matches!(missing, FileError::Io(e) if e.kind() == std::io::ErrorKind::NotFound));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_sparse_file_past_the_cap_is_refused_from_its_size() {
        let dir = temp_dir("sparse");
        let path = dir.join("big.wasm");
        let file = File::create(&path).expect("create");
        // 3 GiB that take no disk: reading it whole took 15 s and 3 GB of memory.
        file.set_len(3 << 30).expect("set the length");
        let error = read_regular(&path, 256 << 20, "--max-plugin-bytes").expect_err("too large");
        assert_eq!(
            error.to_string(),
            "3221225472 bytes, more than the 268435456 allowed (--max-plugin-bytes)"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = temp_dir("fifo");
        let path = dir.join("x.toml");
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("run mkfifo");
        assert!(status.success());
        // Before: opening it waited forever for a writer.
        let error = read_regular(&path, 1 << 20, "cap").expect_err("a FIFO");
        assert_eq!(
            error.to_string(),
            "not a regular file (a FIFO); only regular files are read"
        );
        let error = read_regular(&dir, 1 << 20, "cap").expect_err("a directory");
        assert_eq!(
            error.to_string(),
            "not a regular file (a directory); only regular files are read"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! The store's database: where it is, and its opening at the first use.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use redb::{Builder, ConcurrencyMode, Database};

/// The name of `--store`'s default file, in the state folder.
pub const DEFAULT_STORE_FILE: &str = "store.redb";

/// What `--store` says to keep things in memory.
pub const MEMORY_STORE: &str = "memory";

/// The most memory the database caches of its file (redb's own default is
/// 1 GiB): the state of every subject is a few MiB at the default limits.
const CACHE_BYTES: usize = 16 << 20;

/// Where the store keeps what lasts. Its `Debug` and `Display` forms never
/// show a Redis password.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// In this process's memory: gone at exit.
    Memory,
    /// A redb file (its folder is made when missing, private to its owner).
    File(PathBuf),
    /// The Redis at a `redis://` URL, shared by replicas on any machine
    /// (feature `redis`).
    #[cfg(feature = "redis")]
    Redis(String),
}

impl StoreLocation {
    /// `--store`'s value: [`MEMORY_STORE`], or a file.
    ///
    /// # Errors
    ///
    /// An empty value.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "" => Err(format!(
                "must be `{MEMORY_STORE}`, a file (e.g. ./state/{DEFAULT_STORE_FILE}) or a redis:// URL"
            )),
            MEMORY_STORE => Ok(Self::Memory),
            url if url.starts_with("redis://") || url.starts_with("rediss://") => Self::redis(url),
            path => Ok(Self::File(PathBuf::from(path))),
        }
    }

    /// The Redis at `url`, checked.
    #[cfg(feature = "redis")]
    fn redis(url: &str) -> Result<Self, String> {
        match super::redis_url::check_url(url) {
            Ok(_) => Ok(Self::Redis(url.to_owned())),
            Err(super::redis_url::ConnectError::Url { reason, .. }) => Err(reason),
        }
    }

    /// Without the feature `redis`, no Redis.
    #[cfg(not(feature = "redis"))]
    fn redis(_url: &str) -> Result<Self, String> {
        Err("this build keeps no state in Redis (the feature `redis` is off)".to_owned())
    }

    /// Whether it is a Redis (a request there may have run even when its
    /// answer was lost).
    pub fn is_redis(&self) -> bool {
        match self {
            Self::Memory | Self::File(_) => false,
            #[cfg(feature = "redis")]
            Self::Redis(_) => true,
        }
    }

    /// `--store`'s default: [`DEFAULT_STORE_FILE`] in `$XDG_STATE_HOME/codemode-host`,
    /// else in `~/.local/state/codemode-host`; in memory when neither variable is
    /// set.
    pub fn default_location() -> Self {
        // A relative XDG_STATE_HOME is to be ignored (the XDG base directory
        // specification).
        std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute())
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".local/state"))
            })
            .map_or(Self::Memory, |dir| {
                Self::File(dir.join("codemode-host").join(DEFAULT_STORE_FILE))
            })
    }
}

impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            #[cfg(feature = "redis")]
            Self::Redis(url) => f
                .debug_tuple("Redis")
                .field(&super::redis_url::redacted(url))
                .finish(),
        }
    }
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => f.write_str(MEMORY_STORE),
            Self::File(path) => write!(f, "{}", path.display()),
            #[cfg(feature = "redis")]
            Self::Redis(url) => f.write_str(&super::redis_url::redacted(url)),
        }
    }
}

/// Why the store did not answer: for the log (the reason names the file), never
/// for a model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("store {location}: {reason}")]
pub struct StoreError {
    /// Where the store is.
    pub location: String,
    /// What failed.
    pub reason: String,
}

/// The store: opened at its first use, then shared by every execution.
pub struct Store {
    location: StoreLocation,
    database: Mutex<Option<Arc<Database>>>,
    /// With a Redis location, the state there (or why its URL is no Redis's).
    #[cfg(feature = "redis")]
    redis: Option<Result<super::redis::RedisState, String>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// The store at `location`, not opened yet.
    pub fn new(location: StoreLocation) -> Self {
        #[cfg(feature = "redis")]
        let redis = match &location {
            StoreLocation::Redis(url) => Some(match super::redis_url::check_url(url) {
                Ok(client) => Ok(super::redis::RedisState::new(client)),
                Err(super::redis_url::ConnectError::Url { reason, .. }) => Err(reason),
            }),
            StoreLocation::Memory | StoreLocation::File(_) => None,
        };
        Self {
            location,
            database: Mutex::new(None),
            #[cfg(feature = "redis")]
            redis,
        }
    }

    /// The state in Redis, when the store is there.
    ///
    /// # Errors
    ///
    /// A URL that names no Redis the store can use.
    #[cfg(feature = "redis")]
    pub(crate) fn redis(&self) -> Option<Result<&super::redis::RedisState, StoreError>> {
        self.redis
            .as_ref()
            .map(|redis| redis.as_ref().map_err(|reason| self.error(reason)))
    }

    /// Where it is.
    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// Whether it is in memory: its work never waits on a disk, so it is done on
    /// the calling thread.
    pub(crate) fn in_memory(&self) -> bool {
        self.location == StoreLocation::Memory
    }

    /// The database, opened (and its file created) at the first call. Blocks
    /// while another process commits, as every use of a file store does.
    ///
    /// # Errors
    ///
    /// The folder or the file cannot be made or opened, or the file is no redb
    /// database.
    pub(super) fn database(&self) -> Result<Arc<Database>, StoreError> {
        let mut open = self
            .database
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(database) = open.as_ref() {
            return Ok(database.clone());
        }
        let database = Arc::new(self.open().map_err(|reason| self.error(reason))?);
        *open = Some(database.clone());
        Ok(database)
    }

    fn open(&self) -> Result<Database, String> {
        let mut builder = Builder::new();
        builder.set_cache_size(CACHE_BYTES);
        match &self.location {
            StoreLocation::Memory => builder
                .create_with_backend(redb::backends::InMemoryBackend::new())
                .map_err(|error| error.to_string()),
            StoreLocation::File(path) => {
                make_folder(path)?;
                make_file(path)?;
                builder.set_concurrency_mode(ConcurrencyMode::MultiWriter);
                builder.create(path).map_err(|error| error.to_string())
            }
            // Its calls go to Redis (`Store::redis`), never here.
            #[cfg(feature = "redis")]
            StoreLocation::Redis(_) => Err("the store is in Redis".to_owned()),
        }
    }

    /// A failure of the store at its location.
    pub(crate) fn error(&self, reason: impl std::fmt::Display) -> StoreError {
        StoreError {
            location: self.location.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// Makes the store file `path` when missing, readable and writable by its owner
/// only (redb would make it as the umask says, often readable by all).
fn make_file(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(format!("cannot make the file: {error}")),
    }
}

/// Makes the folder of the store file `path` when missing, writable by its
/// owner only (what an agent keeps is nobody else's to read).
fn make_folder(path: &Path) -> Result<(), String> {
    let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    if folder.is_dir() {
        return Ok(());
    }
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(folder)
        .map_err(|error| format!("cannot make the folder {}: {error}", folder.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_memory_a_file_or_a_redis_url_never_shown_with_its_password() {
        assert_eq!(StoreLocation::parse("memory"), Ok(StoreLocation::Memory));
        assert_eq!(
            StoreLocation::parse("state/store.redb"),
            Ok(StoreLocation::File(PathBuf::from("state/store.redb")))
        );
        assert!(StoreLocation::parse("").is_err());
        #[cfg(feature = "redis")]
        {
            let url = "redis://:secret@127.0.0.1:6379/0";
            let location = StoreLocation::parse(url);
            assert_eq!(location, Ok(StoreLocation::Redis(url.to_owned())));
            assert_eq!(
                location.as_ref().map(ToString::to_string),
                Ok("redis://***@127.0.0.1:6379/0".to_owned())
            );
            assert_eq!(
                location.map(|l| format!("{l:?}")),
                Ok("Redis(\"redis://***@127.0.0.1:6379/0\")".to_owned())
            );
            assert_eq!(
                StoreLocation::parse("rediss://127.0.0.1:6379/0"),
                Err(
                    "TLS to Redis (rediss://) is not supported; reach Redis on a private network"
                        .to_owned()
                )
            );
        }
        #[cfg(not(feature = "redis"))]
        assert_eq!(
            StoreLocation::parse("redis://127.0.0.1:6379/0"),
            Err("this build keeps no state in Redis (the feature `redis` is off)".to_owned())
        );
    }
}

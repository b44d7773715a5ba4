//! OCI references (`registry/namespace/name:tag`, `...@sha256:<hex>`) and digests,
//! checked with the grammar of the OCI distribution spec before anything is asked
//! of a registry.

use std::fmt;

use sha2::{Digest as _, Sha256};

/// The tag a reference without tag or digest names, as `docker pull` does.
pub const DEFAULT_TAG: &str = "latest";

/// The longest reference accepted (the distribution spec caps a repository name
/// at 255 characters; a tag at 128, a digest at 71).
const MAX_REFERENCE: usize = 512;

/// A content digest: `sha256:` and 64 lowercase hex digits, the only algorithm
/// registries are required to support.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self::from_hash(Sha256::digest(bytes).as_slice())
    }

    /// The digest of a finished SHA-256 hash.
    pub(crate) fn from_hash(hash: &[u8]) -> Self {
        Self(format!("sha256:{}", hex::encode(hash)))
    }

    /// Reads `sha256:<64 hex digits>`.
    ///
    /// # Errors
    ///
    /// Another algorithm, or not 64 lowercase hex digits.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let Some((algorithm, hex)) = text.split_once(':') else {
            return Err(ReferenceError::Digest(text.to_owned()));
        };
        if algorithm != "sha256" {
            return Err(ReferenceError::Algorithm(algorithm.to_owned()));
        }
        let valid = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !valid {
            return Err(ReferenceError::Digest(text.to_owned()));
        }
        Ok(Self(text.to_owned()))
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        self.0.strip_prefix("sha256:").unwrap_or(&self.0)
    }

    /// `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a reference names within its repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A tag, which may move.
    Tag(String),
    /// A digest, which names the same bytes forever.
    Digest(Digest),
}

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The registry's host, with its port when it has one (`registry.example:5000`).
    pub registry: String,
    /// The repository within it (`namespace/name`).
    pub repository: String,
    /// The tag or digest.
    pub target: Target,
}

/// Why a reference was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// Empty, too long or with characters no reference has.
    #[error(
        "`{0}` is not an OCI reference: expected registry/namespace/name:tag or registry/namespace/name@sha256:<digest>"
    )]
    Malformed(String),
    /// No registry host before the first `/`.
    #[error(
        "`{0}` names no registry: write its host first, as in registry.example/{0} (there is no default registry)"
    )]
    NoRegistry(String),
    /// A repository name the distribution spec does not allow.
    #[error(
        "`{0}` is not a repository name: lowercase letters and digits, separated by `.`, `_`, `__`, `-` or `/`"
    )]
    Repository(String),
    /// A tag the distribution spec does not allow.
    #[error(
        "`{0}` is not a tag: letters, digits, `_`, `.` and `-`, starting with a letter, digit or `_`, at most 128"
    )]
    Tag(String),
    /// Not `sha256:` and 64 lowercase hex digits.
    #[error("`{0}` is not a digest: expected sha256: and 64 lowercase hex digits")]
    Digest(String),
    /// A digest algorithm other than SHA-256.
    #[error("digests by `{0}` are not supported: only sha256")]
    Algorithm(String),
}

impl Reference {
    /// Reads a reference; an `oci://` in front is allowed, a missing tag is
    /// [`DEFAULT_TAG`]. A tag and a digest together keep the digest (the tag
    /// only documents it, as in `docker pull`).
    ///
    /// # Errors
    ///
    /// See [`ReferenceError`].
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let malformed = || ReferenceError::Malformed(text.to_owned());
        let rest = text.strip_prefix("oci://").unwrap_or(text);
        if rest.is_empty()
            || rest.len() > MAX_REFERENCE
            || rest.chars().any(|c| !c.is_ascii_graphic())
        {
            return Err(malformed());
        }
        let (name, digest) = match rest.split_once('@') {
            Some((name, digest)) => (name, Some(Digest::parse(digest)?)),
            None => (rest, None),
        };
        let Some((registry, path)) = name.split_once('/') else {
            return Err(ReferenceError::NoRegistry(name.to_owned()));
        };
        // As docker tells a registry from a namespace: a host has a dot or a
        // port, or is localhost.
        let is_host = registry.contains('.') || registry.contains(':') || registry == "localhost";
        if !is_host {
            return Err(ReferenceError::NoRegistry(name.to_owned()));
        }
        if !registry
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
        {
            return Err(malformed());
        }
        // A tag is after the last `:` of the path (a port is in the registry).
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repository, tag)) => (repository, Some(tag)),
            None => (path, None),
        };
        check_repository(repository)?;
        if let Some(tag) = tag {
            check_tag(tag)?;
        }
        let target = match (digest, tag) {
            (Some(digest), _) => Target::Digest(digest),
            (None, Some(tag)) => Target::Tag(tag.to_owned()),
            (None, None) => Target::Tag(DEFAULT_TAG.to_owned()),
        };
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            target,
        })
    }

    /// The same repository at `digest`.
    pub fn at(&self, digest: &Digest) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            target: Target::Digest(digest.clone()),
        }
    }

    /// The same repository at `tag`.
    pub fn with_tag(&self, tag: &str) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            target: Target::Tag(tag.to_owned()),
        }
    }

    /// The tag or digest as the registry's API takes it.
    pub fn target_str(&self) -> &str {
        match &self.target {
            Target::Tag(tag) => tag,
            Target::Digest(digest) => digest.as_str(),
        }
    }

    /// The repository's last segment: the default file name of its plugin.
    pub fn name(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }

    /// Whether the registry is this machine (`localhost`, `127.0.0.1`, `[::1]`),
    /// the only registries spoken to over plain HTTP without `insecure`.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            // `[::1]:5000`, `127.0.0.1:5000`; a bare `[::1]` has its `:` inside.
            Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
            _ => &self.registry,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Tag(tag) => write!(f, "{}/{}:{tag}", self.registry, self.repository),
            Target::Digest(digest) => write!(f, "{}/{}@{digest}", self.registry, self.repository),
        }
    }
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*`, at
/// most 255 characters.
fn check_repository(repository: &str) -> Result<(), ReferenceError> {
    let refused = || ReferenceError::Repository(repository.to_owned());
    if repository.is_empty() || repository.len() > 255 {
        return Err(refused());
    }
    for component in repository.split('/') {
        let bytes = component.as_bytes();
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if !bytes.first().is_some_and(|&b| alnum(b)) || !bytes.last().is_some_and(|&b| alnum(b)) {
            return Err(refused());
        }
        let mut at = 0;
        while at < bytes.len() {
            let b = bytes[at];
            if alnum(b) {
                at += 1;
                continue;
            }
            // A separator: `.`, `_`, `__` or a run of `-`, between alphanumerics.
            let run = bytes[at..].iter().take_while(|&&c| c == b).count();
            let allowed = match b {
                b'.' => run == 1,
                b'_' => run <= 2,
                b'-' => true,
                _ => false,
            };
            if !allowed {
                return Err(refused());
            }
            at += run;
        }
    }
    Ok(())
}

/// `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.
fn check_tag(tag: &str) -> Result<(), ReferenceError> {
    let mut chars = tag.chars();
    let first = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let rest = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if first && rest && tag.len() <= 128 {
        Ok(())
    } else {
        Err(ReferenceError::Tag(tag.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_read_as_docker_reads_them() -> Result<(), ReferenceError> {
        let tagged = Reference::parse("registry.example:5000/team/stats:1.2")?;
        assert_eq!(tagged.registry, "registry.example:5000");
        assert_eq!(tagged.repository, "team/stats");
        assert_eq!(tagged.target, Target::Tag("1.2".to_owned()));
        assert_eq!(tagged.name(), "stats");
        assert_eq!(tagged.to_string(), "registry.example:5000/team/stats:1.2");

        let bare = Reference::parse("oci://localhost/stats")?;
        assert_eq!(bare.target, Target::Tag(DEFAULT_TAG.to_owned()));
        assert!(bare.is_loopback());

        let pinned = Reference::parse(&format!("127.0.0.1:5000/a/b:v1@sha256:{HEX}"))?;
        assert_eq!(
            pinned.target,
            Target::Digest(Digest(format!("sha256:{HEX}")))
        );
        assert!(pinned.is_loopback());
        assert_eq!(
            pinned.to_string(),
            format!("127.0.0.1:5000/a/b@sha256:{HEX}")
        );
        assert!(Reference::parse("[::1]:5000/a:b")?.is_loopback());
        assert!(!Reference::parse("registry.example/a:b")?.is_loopback());
        Ok(())
    }

    #[test]
    fn bad_references_are_refused_with_what_is_wrong() {
        let refused = |text: &str| Reference::parse(text).err().map(|e| e.to_string());
        assert_eq!(
            refused("team/stats:1"),
            Some("`team/stats:1` names no registry: write its host first, as in registry.example/team/stats:1 (there is no default registry)".to_owned())
        );
        assert_eq!(
            refused("stats"),
            Some("`stats` names no registry: write its host first, as in registry.example/stats (there is no default registry)".to_owned())
        );
        assert_eq!(
            refused("r.example/Team/stats"),
            Some("`Team/stats` is not a repository name: lowercase letters and digits, separated by `.`, `_`, `__`, `-` or `/`".to_owned())
        );
        for bad in [
            "r.example/a..b",
            "r.example/a___b",
            "r.example/-a",
            "r.example/a/",
            "r.example/",
        ] {
            assert!(
                matches!(Reference::parse(bad), Err(ReferenceError::Repository(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            Reference::parse("r.example/a:-x"),
            Err(ReferenceError::Tag(_))
        ));
        assert!(matches!(
            Reference::parse(&format!("r.example/a:{}", "x".repeat(129))),
            Err(ReferenceError::Tag(_))
        ));
        assert_eq!(
            refused("r.example/a@sha512:00"),
            Some("digests by `sha512` are not supported: only sha256".to_owned())
        );
        assert!(matches!(
            Reference::parse("r.example/a@sha256:ABC"),
            Err(ReferenceError::Digest(_))
        ));
        assert!(matches!(
            Reference::parse("r.example/a b"),
            Err(ReferenceError::Malformed(_))
        ));
        assert!(matches!(
            Reference::parse(""),
            Err(ReferenceError::Malformed(_))
        ));
    }

    #[test]
    fn a_digest_is_the_sha256_of_the_bytes() -> Result<(), ReferenceError> {
        let digest = Digest::of(b"abc");
        assert_eq!(
            digest.as_str(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(digest.as_str())?, digest);
        assert_eq!(digest.hex().len(), 64);
        Ok(())
    }
}

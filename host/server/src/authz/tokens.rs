//! Bearer tokens: who an HTTP request acts for.
//!
//! The tokens file (`--tokens FILE`) maps subjects to the SHA-256 of their tokens,
//! one `subject-id sha256-hex` per line (`#` starts a comment). The file never holds
//! a token, so reading it does not let anyone act as a subject. A presented token is
//! hashed and compared with every entry in constant time, so the time a check takes
//! says nothing about how close a guess was.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::subject::Subject;

/// Why a tokens file was refused; `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokensError {
    /// A line is not `subject-id sha256-hex`.
    #[error("line {line}: expected `subject-id sha256-hex-of-token`, found {found} field(s)")]
    Fields {
        /// The line.
        line: usize,
        /// How many whitespace-separated fields it had.
        found: usize,
    },
    /// The hash is not 64 hex digits.
    #[error("line {line}: the token hash must be 64 hex digits (the SHA-256 of the token)")]
    Hash {
        /// The line.
        line: usize,
    },
    /// The same hash appears twice: one token would act for two subjects.
    #[error("line {line}: the same token hash is already given on line {first}")]
    Duplicate {
        /// The line.
        line: usize,
        /// Where it first appeared.
        first: usize,
    },
    /// No entries at all: no request could ever authenticate.
    #[error("no tokens: add one `subject-id sha256-hex-of-token` line per token")]
    Empty,
}

/// The subjects that may call over HTTP, by token hash.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<([u8; 32], Subject)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("subjects", &self.entries.len())
            .finish()
    }
}

impl Tokens {
    /// Parses a tokens file's text.
    ///
    /// # Errors
    ///
    /// [`TokensError`] for a malformed line, a repeated hash or no entries.
    pub fn parse(text: &str) -> Result<Self, TokensError> {
        let mut entries: Vec<([u8; 32], Subject)> = Vec::new();
        let mut lines_of: Vec<usize> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or_default();
            let fields: Vec<&str> = content.split_whitespace().collect();
            if fields.is_empty() {
                continue;
            }
            let [subject, hash] = fields[..] else {
                return Err(TokensError::Fields {
                    line,
                    found: fields.len(),
                });
            };
            let hash = decode_hex(hash).ok_or(TokensError::Hash { line })?;
            if let Some(at) = entries.iter().position(|(h, _)| *h == hash) {
                return Err(TokensError::Duplicate {
                    line,
                    first: lines_of[at],
                });
            }
            entries.push((hash, Subject::new(subject)));
            lines_of.push(line);
        }
        if entries.is_empty() {
            return Err(TokensError::Empty);
        }
        Ok(Self { entries })
    }

    /// How many tokens are known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no token is known (never true for a parsed file).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The subject `token` acts for, if any. Every entry is compared, in constant
    /// time each.
    pub fn resolve(&self, token: &str) -> Option<Subject> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (candidate, subject) in &self.entries {
            if bool::from(candidate.ct_eq(&hash)) {
                found = Some(subject);
            }
        }
        found.cloned()
    }
}

/// The lowercase hex SHA-256 of `token`: what a tokens file line holds.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// 64 hex digits (either case) as 32 bytes.
fn decode_hex(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_resolves_to_its_subject() -> anyhow::Result<()> {
        let text = format!(
            "# analysts\nanalyst {}\n\nguest {}  # read-only\n",
            token_hash("s3cret-a"),
            token_hash("s3cret-g").to_uppercase()
        );
        let tokens = Tokens::parse(&text)?;
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens.resolve("s3cret-a"), Some(Subject::new("analyst")));
        assert_eq!(tokens.resolve("s3cret-g"), Some(Subject::new("guest")));
        assert_eq!(tokens.resolve("s3cret-x"), None);
        assert_eq!(tokens.resolve(""), None);
        Ok(())
    }

    #[test]
    fn the_hash_is_sha256_hex() {
        assert_eq!(
            token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn malformed_files_name_the_line() {
        let hash = token_hash("t");
        let cases = [
            (
                "analyst\n".to_owned(),
                TokensError::Fields { line: 1, found: 1 },
            ),
            (
                format!("\nanalyst {hash} extra\n"),
                TokensError::Fields { line: 2, found: 3 },
            ),
            (
                format!("analyst {}\n", &hash[..63]),
                TokensError::Hash { line: 1 },
            ),
            (
                format!("analyst {}zz\n", &hash[..62]),
                TokensError::Hash { line: 1 },
            ),
            (
                format!("a {hash}\nb {hash}\n"),
                TokensError::Duplicate { line: 2, first: 1 },
            ),
            ("# nothing\n\n".to_owned(), TokensError::Empty),
        ];
        for (text, expected) in cases {
            assert_eq!(Tokens::parse(&text).err(), Some(expected), "{text:?}");
        }
        assert_eq!(
            TokensError::Fields { line: 3, found: 1 }.to_string(),
            "line 3: expected `subject-id sha256-hex-of-token`, found 1 field(s)"
        );
    }
}

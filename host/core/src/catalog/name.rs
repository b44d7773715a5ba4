//! Capability identities: the dotted name agents call and the stable ID policies see.
//!
//! The rules are the seed's (Go digest §6.1): a name has at least two segments, each a
//! Starlark identifier that is not a keyword, and its first segment is not a reserved
//! root (a builtin of the fixed language surface). This module knows nothing of
//! plugins or WIT; the loader turns WIT names into candidate strings first.

use std::fmt;

/// Starlark keywords (and words reserved by the dialect); none may be a name segment
/// or a keyword-argument name.
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "async", "await", "break", "class", "continue", "def",
    "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
    "is", "lambda", "load", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// First segments a capability name may not use: every name of the standard Starlark
/// universe (including `set`, which is reserved but unavailable) plus the three
/// additions of the fixed surface. `time` is deliberately absent (seed: "a host-defined
/// time.* capability remains legal").
pub const RESERVED_ROOTS: &[&str] = &[
    "False",
    "None",
    "True",
    "abs",
    "all",
    "any",
    "bool",
    "bytes",
    "chr",
    "dict",
    "dir",
    "enumerate",
    "fail",
    "float",
    "getattr",
    "hasattr",
    "hash",
    "int",
    "json",
    "len",
    "list",
    "math",
    "max",
    "min",
    "ord",
    "print",
    "range",
    "repr",
    "reversed",
    "set",
    "sorted",
    "str",
    "sum",
    "tuple",
    "type",
    "zip",
];

/// Why a capability name, ID or keyword name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name has fewer than two dot-separated segments.
    #[error("name {0:?} must have at least two dot-separated segments, like \"records.lookup\"")]
    TooFewSegments(String),
    /// A segment is empty or not a Starlark identifier.
    #[error(
        "name {name:?}: segment {segment:?} is not an identifier (letters, `_` and ASCII digits, not starting with a digit)"
    )]
    BadSegment {
        /// The whole name.
        name: String,
        /// The offending segment.
        segment: String,
    },
    /// A segment is a Starlark keyword.
    #[error("name {name:?}: segment {segment:?} is a Starlark keyword")]
    KeywordSegment {
        /// The whole name.
        name: String,
        /// The offending segment.
        segment: String,
    },
    /// The first segment is a builtin of the fixed language surface.
    #[error("name {name:?}: the first segment {root:?} is reserved by the language surface")]
    ReservedRoot {
        /// The whole name.
        name: String,
        /// The reserved first segment.
        root: String,
    },
    /// An ID is empty or has surrounding whitespace.
    #[error("ID {0:?} must be non-empty without surrounding whitespace")]
    BadId(String),
    /// A keyword-argument name is not a plain Starlark identifier.
    #[error(
        "parameter name {0:?} is not usable as a keyword argument (an identifier that is not a Starlark keyword)"
    )]
    BadParameter(String),
}

/// The dotted name agents call (`records.lookup`), validated by the seed's rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DottedName(Box<str>);

impl DottedName {
    /// Validates `name`.
    ///
    /// # Errors
    ///
    /// [`NameError::TooFewSegments`], [`NameError::BadSegment`],
    /// [`NameError::KeywordSegment`] or [`NameError::ReservedRoot`].
    pub fn parse(name: &str) -> Result<Self, NameError> {
        let segments: Vec<&str> = name.split('.').collect();
        if segments.len() < 2 {
            return Err(NameError::TooFewSegments(name.to_owned()));
        }
        for segment in &segments {
            if !is_identifier(segment) {
                return Err(NameError::BadSegment {
                    name: name.to_owned(),
                    segment: (*segment).to_owned(),
                });
            }
            if KEYWORDS.contains(segment) {
                return Err(NameError::KeywordSegment {
                    name: name.to_owned(),
                    segment: (*segment).to_owned(),
                });
            }
        }
        if RESERVED_ROOTS.contains(&segments[0]) {
            return Err(NameError::ReservedRoot {
                name: name.to_owned(),
                root: segments[0].to_owned(),
            });
        }
        Ok(Self(name.into()))
    }

    /// The name as agents write it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `self` is a namespace of `other` (`records` of `records.lookup`, or
    /// `records.lookup` of `records.lookup.detail`).
    pub fn is_namespace_of(&self, other: &DottedName) -> bool {
        other
            .0
            .strip_prefix(&*self.0)
            .is_some_and(|rest| rest.starts_with('.'))
    }
}

impl fmt::Display for DottedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The stable identity of a capability, used by `--disable` and authorization.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CapabilityId(Box<str>);

impl CapabilityId {
    /// Validates `id`: non-empty, no surrounding whitespace.
    ///
    /// # Errors
    ///
    /// [`NameError::BadId`].
    pub fn parse(id: &str) -> Result<Self, NameError> {
        if id.is_empty() || id.trim() != id {
            return Err(NameError::BadId(id.to_owned()));
        }
        Ok(Self(id.into()))
    }

    /// The ID as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CapabilityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks that `name` can be a keyword argument: an identifier and not a keyword.
///
/// # Errors
///
/// [`NameError::BadParameter`].
pub fn check_parameter_name(name: &str) -> Result<(), NameError> {
    if is_identifier(name) && !KEYWORDS.contains(&name) {
        Ok(())
    } else {
        Err(NameError::BadParameter(name.to_owned()))
    }
}

/// A Starlark identifier: a letter or `_` first (Unicode letters allowed), then
/// letters, `_` or ASCII digits.
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) if first == '_' || first.is_alphabetic() => {
            chars.all(|c| c == '_' || c.is_alphabetic() || c.is_ascii_digit())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_name_accepts_and_rejects_by_the_seed_rules() {
        let cases: &[(&str, &str, Option<NameError>)] = &[
            ("two segments", "records.lookup", None),
            ("deep", "github.pulls.create_review", None),
            ("nested leaf may be a builtin", "stats.sum", None),
            ("time is not reserved", "time.now", None),
            ("unicode letters", "données.liste", None),
            ("ascii digits after first", "v2.get_3", None),
            (
                "one segment",
                "records",
                Some(NameError::TooFewSegments("records".into())),
            ),
            (
                "empty segment",
                "records..lookup",
                Some(NameError::BadSegment {
                    name: "records..lookup".into(),
                    segment: String::new(),
                }),
            ),
            (
                "leading digit",
                "records.2x",
                Some(NameError::BadSegment {
                    name: "records.2x".into(),
                    segment: "2x".into(),
                }),
            ),
            (
                "non-ascii digit",
                "records.x٣",
                Some(NameError::BadSegment {
                    name: "records.x٣".into(),
                    segment: "x٣".into(),
                }),
            ),
            (
                "hyphen",
                "records.look-up",
                Some(NameError::BadSegment {
                    name: "records.look-up".into(),
                    segment: "look-up".into(),
                }),
            ),
            (
                "keyword",
                "records.for",
                Some(NameError::KeywordSegment {
                    name: "records.for".into(),
                    segment: "for".into(),
                }),
            ),
            (
                "reserved json",
                "json.fetch",
                Some(NameError::ReservedRoot {
                    name: "json.fetch".into(),
                    root: "json".into(),
                }),
            ),
            (
                "reserved set",
                "set.x",
                Some(NameError::ReservedRoot {
                    name: "set.x".into(),
                    root: "set".into(),
                }),
            ),
            (
                "reserved sum",
                "sum.x",
                Some(NameError::ReservedRoot {
                    name: "sum.x".into(),
                    root: "sum".into(),
                }),
            ),
            (
                "reserved len",
                "len.x",
                Some(NameError::ReservedRoot {
                    name: "len.x".into(),
                    root: "len".into(),
                }),
            ),
            (
                "reserved math",
                "math.add",
                Some(NameError::ReservedRoot {
                    name: "math.add".into(),
                    root: "math".into(),
                }),
            ),
        ];
        for (case, name, want) in cases {
            let got = DottedName::parse(name);
            match want {
                None => assert_eq!(got.map(|n| n.to_string()).as_deref(), Ok(*name), "{case}"),
                Some(err) => assert_eq!(got.as_ref().err(), Some(err), "{case}"),
            }
        }
    }

    #[test]
    fn namespace_relation_is_segment_wise() {
        let parse = |s| DottedName::parse(s).map_err(|e| e.to_string());
        let a = parse("records.lookup");
        let b = parse("records.lookup.detail");
        let c = parse("records.lookups");
        match (a, b, c) {
            (Ok(a), Ok(b), Ok(c)) => {
                assert!(a.is_namespace_of(&b));
                assert!(!b.is_namespace_of(&a));
                assert!(!a.is_namespace_of(&c));
            }
            other => panic!("names must parse: {other:?}"),
        }
    }

    #[test]
    fn capability_id_rejects_blank_and_padded() {
        assert!(CapabilityId::parse("records.entry.lookup").is_ok());
        for bad in ["", " x", "x ", "\tx"] {
            assert_eq!(
                CapabilityId::parse(bad),
                Err(NameError::BadId(bad.into())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn parameter_names_must_be_non_keyword_identifiers() {
        assert!(check_parameter_name("min_score").is_ok());
        for bad in ["from", "in", "2x", "a-b", ""] {
            assert_eq!(
                check_parameter_name(bad),
                Err(NameError::BadParameter(bad.into())),
                "{bad:?}"
            );
        }
    }
}

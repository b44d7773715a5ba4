//! What an upstream tool is called in the catalog: its capability name, its stable
//! ID and its texts.

/// The prefix of every upstream capability's stable ID: `mcp:<upstream>/<tool>`.
pub use crate::source::UPSTREAM_ID_PREFIX as ID_PREFIX;

/// The last segment of the capability for tool `tool`: camelCase split into
/// snake_case, lower case, and every character that is not a letter, digit or `_`
/// replaced by `_` (`getCurrentTime` → `get_current_time`, `list-files` →
/// `list_files`, `HTTPGet` → `http_get`). Whether the result is a valid segment is
/// the catalog's to say.
pub fn segment(tool: &str) -> String {
    let chars: Vec<char> = tool.chars().collect();
    let mut out = String::with_capacity(tool.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() && i > 0 {
            let before = chars[i - 1];
            let after = chars.get(i + 1).copied();
            // A word starts at an upper-case letter after a lower-case one or a digit
            // (`getTime`), or at the last capital of a run followed by a lower-case
            // letter (`HTTPGet`: `http`, `get`).
            let starts_word = before.is_lowercase()
                || before.is_ascii_digit()
                || (before.is_uppercase() && after.is_some_and(char::is_lowercase));
            if starts_word && !out.ends_with('_') {
                out.push('_');
            }
        }
        for lower in c.to_lowercase() {
            out.push(if lower.is_ascii_alphanumeric() || lower == '_' {
                lower
            } else {
                '_'
            });
        }
    }
    out
}

/// The stable ID of tool `tool` of upstream `upstream`.
pub fn id(upstream: &str, tool: &str) -> String {
    format!("{ID_PREFIX}{upstream}/{tool}")
}

/// The summary and the description of a tool: the first sentence of its
/// description and the rest (`None`: the summary is all there is). Without a
/// description the title, or else the tool's name, is the summary.
pub fn texts(
    tool: &str,
    title: Option<&str>,
    description: Option<&str>,
) -> (String, Option<String>) {
    let clean = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let description = description.map(clean).filter(|d| !d.is_empty());
    let Some(description) = description else {
        let title = title.map(clean).filter(|t| !t.is_empty());
        return (title.unwrap_or_else(|| tool.to_owned()), None);
    };
    // The first sentence ends at `.`, `!` or `?` followed by a space and a capital
    // letter: not inside `e.g. v1.2`. (Whitespace was collapsed to single spaces.)
    let chars: Vec<(usize, char)> = description.char_indices().collect();
    let end = chars.windows(3).find_map(|w| match w {
        [(i, c @ ('.' | '!' | '?')), (_, ' '), (_, next)] if next.is_uppercase() => {
            Some(i + c.len_utf8())
        }
        _ => None,
    });
    match end {
        Some(end) => {
            let rest = description[end..].trim();
            let summary = description[..end].to_owned();
            (summary, (!rest.is_empty()).then(|| rest.to_owned()))
        }
        None => (description, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_become_snake_case_segments() {
        let cases = [
            ("git_log", "git_log"),
            ("get_current_time", "get_current_time"),
            ("getCurrentTime", "get_current_time"),
            ("HTTPGet", "http_get"),
            ("list-files", "list_files"),
            ("read file", "read_file"),
            ("v2Search", "v2_search"),
            ("echo", "echo"),
            ("Über", "_ber"),
            ("a.b", "a_b"),
            ("123", "123"),
        ];
        for (tool, want) in cases {
            assert_eq!(segment(tool), want, "{tool}");
        }
    }

    #[test]
    fn the_first_sentence_is_the_summary() {
        assert_eq!(
            texts(
                "t",
                None,
                Some("Get the current time.  Uses the IANA\n database.")
            ),
            (
                "Get the current time.".to_owned(),
                Some("Uses the IANA database.".to_owned())
            )
        );
        assert_eq!(
            texts("t", Some("Title"), Some("Shows the log (e.g. v1.2)")),
            ("Shows the log (e.g. v1.2)".to_owned(), None)
        );
        assert_eq!(
            texts("t", Some(" Current  time "), Some("  ")),
            ("Current time".to_owned(), None)
        );
        assert_eq!(texts("git_log", None, None), ("git_log".to_owned(), None));
        assert_eq!(id("git", "git_log"), "mcp:git/git_log");
    }
}

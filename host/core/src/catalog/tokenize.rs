//! The search tokenizer shared by queries and capability documents (Go digest §5.2).
//!
//! Every rune that is not a letter or digit separates tokens; inside a run, tokens
//! split at letter/digit transitions, at lower→upper (unless the token began upper,
//! which keeps `GitHub` and `MySQL` whole) and before the last capital of an acronym
//! followed by a lowercase rune (`XMLFile` → `XML`, `File`). Tokens are lowercased and
//! connector words dropped.

/// Words that carry no meaning in a task query; dropped from queries and documents.
pub const CONNECTORS: &[&str] = &[
    "a", "an", "and", "by", "for", "from", "in", "of", "on", "or", "the", "to", "with",
];

/// Splits `text` into lowercase tokens, connector words removed, in order (duplicates
/// kept; callers deduplicate per field).
pub fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current: Vec<char> = Vec::new();
    let chars: Vec<char> = text.trim().chars().collect();
    let flush = |current: &mut Vec<char>, tokens: &mut Vec<String>| {
        if !current.is_empty() {
            let token: String = current.iter().collect::<String>().to_lowercase();
            if !CONNECTORS.contains(&token.as_str()) {
                tokens.push(token);
            }
            current.clear();
        }
    };
    for (i, &c) in chars.iter().enumerate() {
        if !is_letter(c) && !is_digit(c) {
            flush(&mut current, &mut tokens);
            continue;
        }
        if let Some(&prev) = current.last() {
            let began_upper = current.first().is_some_and(|f| f.is_uppercase());
            let next = chars.get(i + 1).copied();
            let split = (is_letter(prev) && is_digit(c))
                || (is_digit(prev) && is_letter(c))
                || (prev.is_lowercase() && c.is_uppercase() && !began_upper)
                || (prev.is_uppercase()
                    && c.is_uppercase()
                    && next.is_some_and(char::is_lowercase));
            if split {
                flush(&mut current, &mut tokens);
            }
        }
        current.push(c);
    }
    flush(&mut current, &mut tokens);
    tokens
}

/// Removes repeated tokens, keeping the first occurrence of each.
pub fn dedup(tokens: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    tokens
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

fn is_letter(c: char) -> bool {
    c.is_alphabetic()
}

fn is_digit(c: char) -> bool {
    c.is_numeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_splits_like_the_reference() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "dotted camel",
                "GitHub.Pulls.createReview",
                &["github", "pulls", "create", "review"],
            ),
            ("underscore", "pull_request", &["pull", "request"]),
            ("acronym tail", "parseXMLFile", &["parse", "xml", "file"]),
            ("brand kept whole", "MySQL", &["mysql"]),
            ("letter digit", "base64Encode", &["base", "64", "encode"]),
            ("digit letter", "v2api", &["v", "2", "api"]),
            ("hyphen and space", " look-up  key ", &["look", "up", "key"]),
            (
                "connectors dropped",
                "find the books by an author",
                &["find", "books", "author"],
            ),
            ("connector only", "the and of", &[]),
            ("separators only", "..--__", &[]),
            ("blank", "   ", &[]),
            ("unicode letters", "Über straße", &["über", "straße"]),
            ("all caps word", "HTTP", &["http"]),
            ("caps then word", "HTTPServer", &["http", "server"]),
        ];
        for (case, input, want) in cases {
            assert_eq!(
                tokenize(input),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{case}"
            );
        }
    }

    #[test]
    fn dedup_keeps_first_occurrence_order() {
        let tokens = vec![
            "b".to_string(),
            "a".into(),
            "b".into(),
            "c".into(),
            "a".into(),
        ];
        assert_eq!(dedup(tokens), vec!["b", "a", "c"]);
    }
}

//! Example plugin `text`: slugs, word counts and template filling.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

codemode_sdk::generate!({ world: "plugin", path: "wit" });

use exports::example::text::text::{self, Filled, Slug, WordCountResult};

struct Text;

#[codemode_sdk::capabilities]
impl text::Guest for Text {
    /// Turn a title into a URL slug.
    ///
    /// Lowercases the text, folds accented Latin letters (é → e, ß → ss), and joins the
    /// runs of letters and digits with the separator (default "-"): "Crème Brûlée Recipes!"
    /// → "creme-brulee-recipes".
    #[capability(search_terms = ["url", "permalink", "kebab case"])]
    fn slugify(text: String, separator: Option<String>) -> Result<Slug, String> {
        let separator = separator.unwrap_or_else(|| "-".to_owned());
        if separator.chars().any(char::is_alphanumeric) || separator.chars().count() > 3 {
            return Err(format!(
                "separator {separator:?} must be at most 3 characters and contain no letters or digits"
            ));
        }
        Ok(Slug {
            slug: slugify(&text, &separator),
        })
    }

    /// Count how often each word occurs in a text.
    ///
    /// Splits the text into words (letters, digits and apostrophes), lowercases them and
    /// returns the total and a dict of word → count; with top=N only the N most frequent
    /// words (ties alphabetically).
    #[capability(search_terms = ["word frequency", "tally", "histogram of words"])]
    fn word_counts(text: String, top: Option<u32>) -> WordCountResult {
        let words = words(&text);
        let mut counts: Vec<(String, u32)> = Vec::new();
        for word in &words {
            match counts.iter_mut().find(|(w, _)| w == word) {
                Some((_, n)) => *n += 1,
                None => counts.push((word.clone(), 1)),
            }
        }
        // Most frequent first, ties alphabetically; then keep the top N.
        counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if let Some(top) = top {
            counts.truncate(top as usize);
        }
        WordCountResult {
            total: words.len() as u32,
            counts,
        }
    }

    /// Fill {name} placeholders in a template.
    ///
    /// Replaces each {name} in the template with values[name]; {{ and }} are literal
    /// braces. Fails naming the placeholder when a value is missing.
    #[capability(search_terms = ["template", "format string", "substitute"])]
    fn fill(template: String, values: Vec<(String, String)>) -> Result<Filled, String> {
        fill(&template, &values)
    }
}

/// Lowercase ASCII letters and digits joined by `separator`; accented Latin letters
/// are folded to their base letter, everything else separates words.
fn slugify(text: &str, separator: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        let folded = fold(c);
        if folded.is_empty() {
            if !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
        } else {
            current.push_str(&folded);
        }
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts.join(separator)
}

/// The lowercase ASCII spelling of `c`, or "" when it separates words.
fn fold(c: char) -> String {
    let base = match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'À' | 'Á' | 'Â' | 'Ã' | 'Ä' | 'Å' => "a",
        'ç' | 'Ç' => "c",
        'è' | 'é' | 'ê' | 'ë' | 'È' | 'É' | 'Ê' | 'Ë' => "e",
        'ì' | 'í' | 'î' | 'ï' | 'Ì' | 'Í' | 'Î' | 'Ï' => "i",
        'ñ' | 'Ñ' => "n",
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'Ò' | 'Ó' | 'Ô' | 'Õ' | 'Ö' | 'Ø' => "o",
        'ù' | 'ú' | 'û' | 'ü' | 'Ù' | 'Ú' | 'Û' | 'Ü' => "u",
        'ý' | 'ÿ' | 'Ý' => "y",
        'ß' => "ss",
        'æ' | 'Æ' => "ae",
        'œ' | 'Œ' => "oe",
        c if c.is_ascii_alphanumeric() => return c.to_ascii_lowercase().to_string(),
        _ => "",
    };
    base.to_owned()
}

/// Words: runs of letters, digits and apostrophes, lowercased.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Replaces `{name}` placeholders; `{{` and `}}` are literal braces.
fn fill(template: &str, values: &[(String, String)]) -> Result<Filled, String> {
    let mut out = String::new();
    let mut used: Vec<String> = Vec::new();
    let mut chars = template.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|&(_, n)| n) == Some('{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek().map(|&(_, n)| n) == Some('}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let rest = &template[i + 1..];
                let Some(end) = rest.find('}') else {
                    return Err(format!(
                        "unclosed placeholder at byte {i}; write {{{{ for a literal brace"
                    ));
                };
                let name = &rest[..end];
                let Some((_, value)) = values.iter().find(|(k, _)| k == name) else {
                    let mut known: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
                    known.sort_unstable();
                    return Err(format!(
                        "no value for placeholder {{{name}}} (values given: {})",
                        known.join(", ")
                    ));
                };
                out.push_str(value);
                if !used.iter().any(|u| u == name) {
                    used.push(name.to_owned());
                }
                for _ in 0..=end {
                    chars.next();
                }
            }
            '}' => {
                return Err(format!(
                    "unmatched }} at byte {i}; write }}}} for a literal brace"
                ));
            }
            c => out.push(c),
        }
    }
    Ok(Filled { text: out, used })
}

export!(Text);

// Pure functions of their arguments: a policy that asks before writes lets them
// run.
codemode_sdk::annotations![
    codemode_sdk::Annotated::new("text.slugify")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    codemode_sdk::Annotated::new("text.word-counts")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    codemode_sdk::Annotated::new("text.fill")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugify_folds_and_joins() {
        assert_eq!(
            slugify("Crème Brûlée Recipes!", "-"),
            "creme-brulee-recipes"
        );
        assert_eq!(slugify("  Straße 42 ", "_"), "strasse_42");
        assert_eq!(slugify("!!!", "-"), "");
    }

    #[test]
    fn words_are_lowercased_runs() {
        assert_eq!(
            words("It's a dog's-life, A DOG"),
            vec!["it's", "a", "dog's", "life", "a", "dog"]
        );
    }

    #[test]
    fn fill_replaces_and_reports_missing() {
        let values = vec![("name".to_string(), "Ada".to_string())];
        assert_eq!(
            fill("Hi {name}, {{ok}} {name}", &values).map(|f| (f.text, f.used)),
            Ok(("Hi Ada, {ok} Ada".to_string(), vec!["name".to_string()]))
        );
        assert_eq!(
            fill("{x}", &values).map(|f| f.text),
            Err("no value for placeholder {x} (values given: name)".to_string())
        );
        assert_eq!(
            fill("a } b", &values).map(|f| f.text),
            Err("unmatched } at byte 2; write }} for a literal brace".to_string())
        );
    }
}

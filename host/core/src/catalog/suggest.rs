//! "Did you mean": the catalog's names nearest a name that is not one of them.

/// Nearest names offered.
const MAX_SUGGESTIONS: usize = 3;

/// The most edits a suggestion may be away from the name asked for.
const MAX_SUGGESTION_DISTANCE: usize = 3;

/// Up to [`MAX_SUGGESTIONS`] names close to `name`: each catalog name is compared
/// over as many segments as `name` has, so `recods` finds the root `records` and
/// `records.lokup` finds `records.lookup`.
///
/// `name` comes from the program and may be of any size: the work is bounded by the
/// catalog's names, not by it. A name too long to be within
/// [`MAX_SUGGESTION_DISTANCE`] edits of any catalog name is not looked at further,
/// and only candidates of a plausible length are compared.
pub fn suggest(names: &[String], name: &str) -> Vec<String> {
    // A character is at most 4 bytes: a name this long has more characters than any
    // catalog name plus the distance allowed.
    let longest = names.iter().map(String::len).max().unwrap_or(0);
    if name.len() > (longest + MAX_SUGGESTION_DISTANCE) * 4 {
        return Vec::new();
    }
    let length = name.chars().count();
    let allowed = (length / 3).clamp(1, MAX_SUGGESTION_DISTANCE);
    let segments = name.split('.').count();
    let mut scored: Vec<(usize, String)> = Vec::new();
    for candidate in names {
        let prefix: String = candidate
            .split('.')
            .take(segments)
            .collect::<Vec<_>>()
            .join(".");
        // The distance is at least the difference in length.
        if prefix.chars().count().abs_diff(length) > allowed {
            continue;
        }
        let distance = strsim::levenshtein(name, &prefix);
        if distance <= allowed && !scored.iter().any(|(_, n)| *n == prefix) {
            scored.push((distance, prefix));
        }
    }
    scored.sort();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, n)| n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        [
            "records.lookup",
            "records.query",
            "stats.summary",
            "text.word_counts",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn suggestions_compare_as_many_segments_as_the_name_has() {
        assert_eq!(suggest(&names(), "records.lokup"), vec!["records.lookup"]);
        assert_eq!(suggest(&names(), "recods"), vec!["records"]);
        assert_eq!(suggest(&names(), "stats.summry"), vec!["stats.summary"]);
        assert!(suggest(&names(), "weather.today").is_empty());
    }

    #[test]
    fn names_of_implausible_length_get_no_suggestions_and_cost_no_comparison() {
        // Before the length bound, a 100 MB name kept a core busy for 23 s.
        let huge = "a".repeat(50_000_000);
        assert!(suggest(&names(), &huge).is_empty());
        let long = format!("records.{}", "x".repeat(40));
        assert!(suggest(&names(), &long).is_empty());
        // Within the bound, one edit away still finds its name.
        assert_eq!(
            suggest(&names(), "text.word_count"),
            vec!["text.word_counts"]
        );
        assert!(suggest(&[], "records").is_empty());
    }
}

//! Ranked search over enabled capabilities (Go digest §5).
//!
//! Scoring is integer arithmetic: for each distinct query token, the best field
//! contribution `weight × rarity × quality` (name 12, search terms 10, summary 5,
//! description 2; exact 100, prefix 72), summed; a capability is eligible when it
//! matched at least `ceil(2q/3)` of `q` tokens (all of them for q ≤ 2) and scores
//! `raw × matched / q`. An exact dotted-name query ranks first, then score, then name.
//!
//! Two departures from the Go library (docs/architecture.md), for catalogs of a
//! thousand operations named alike (GitHub's API), where the operation a plain
//! task phrase describes otherwise loses to every longer name holding the same
//! words:
//! - a query token also matches, with the prefix quality, a whole word that
//!   [`SYNONYMS`] gives for it (`open` → `create`, `read` → `get`) and its
//!   singular (`contents` → `content`, `branches` → `branch`, `policies` →
//!   `policy`);
//! - a capability whose whole summary the query says (every summary token
//!   matched by a query token or one of its alternatives: "get a repository"
//!   and `Get a repository`) scores half again as much.

use std::collections::HashMap;

use super::tokenize::{dedup, tokenize};

/// Raw query bytes allowed before trimming (whitespace counts).
pub const MAX_SEARCH_QUERY_BYTES: usize = 256;
/// Distinct normalized query tokens allowed.
pub const MAX_QUERY_TOKENS: usize = 16;
/// Results returned by one search.
pub const MAX_SEARCH_RESULTS: usize = 20;
/// Bound on the compact JSON of one `{results, truncated}` response.
pub const MAX_SEARCH_RESPONSE_BYTES: usize = 65_536;

/// What a capability whose whole summary the query says scores, over 2.
const SUMMARY_SAID: u64 = 3;

/// The words a query word also matches (as a prefix match does): the verbs
/// and nouns APIs name one way and people another.
const SYNONYMS: &[(&str, &[&str])] = &[
    ("add", &["create"]),
    ("new", &["create"]),
    ("make", &["create"]),
    ("open", &["create"]),
    ("read", &["get"]),
    ("fetch", &["get"]),
    ("show", &["get"]),
    ("view", &["get"]),
    ("retrieve", &["get"]),
    ("edit", &["update"]),
    ("change", &["update"]),
    ("modify", &["update"]),
    ("find", &["search"]),
];

/// The whole words a query `token` also matches: its [`SYNONYMS`] (each also
/// with a final `s`), and its singular when it reads as an English plural of 4
/// or more characters (`-ies` → `-y`, `-ches`/`-shes`/`-sses`/`-xes`/`-zes` →
/// without `-es`, else without `-s`; not `-ss`, `-us` or `-is`).
fn alternatives(token: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, words) in SYNONYMS.iter().filter(|(word, _)| *word == token) {
        for word in *words {
            out.push((*word).to_owned());
            out.push(format!("{word}s"));
        }
    }
    if token.chars().count() >= 4 {
        let singular = if let Some(stem) = token.strip_suffix("ies") {
            Some(format!("{stem}y"))
        } else if ["ches", "shes", "sses", "xes", "zes"]
            .iter()
            .any(|ending| token.ends_with(ending))
        {
            token.strip_suffix("es").map(str::to_owned)
        } else if ["ss", "us", "is"]
            .iter()
            .any(|ending| token.ends_with(ending))
        {
            None
        } else {
            token.strip_suffix('s').map(str::to_owned)
        };
        out.extend(singular);
    }
    out
}

/// Field weights in precedence order: name, search terms, summary, description.
const WEIGHTS: [u64; 4] = [12, 10, 5, 2];
const EXACT: u64 = 100;
const PREFIX: u64 = 72;
/// `{"results":[`
const RESPONSE_OPEN: usize = 12;
/// `],"truncated":false}`
const RESPONSE_CLOSE: usize = 20;

/// One search hit: what `search_api` returns per capability.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SearchResult {
    /// Exact dotted name.
    pub name: String,
    /// Invocation-only keyword signature.
    pub signature: String,
    /// Registered summary.
    pub summary: String,
}

/// The successful value of `search_api`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SearchResponse {
    /// Highest-ranked prefix that fits the count and byte bounds.
    pub results: Vec<SearchResult>,
    /// Whether at least one eligible capability was left out by a bound.
    pub truncated: bool,
}

/// Why a query was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    /// More than [`MAX_SEARCH_QUERY_BYTES`] raw bytes or [`MAX_QUERY_TOKENS`] tokens.
    #[error("search query limit exceeded")]
    QueryLimit,
}

/// The searchable text of one capability, as the catalog hands it to the index.
pub struct Document<'a> {
    pub name: &'a str,
    pub signature: &'a str,
    pub summary: &'a str,
    pub description: &'a str,
    pub search_terms: &'a [String],
}

struct IndexedDoc {
    result: SearchResult,
    lowercase_name: String,
    /// Tokens of name, search terms, summary, description; each deduplicated.
    fields: [Vec<String>; 4],
    /// Compact JSON size of `result` with Go's escaping.
    result_bytes: usize,
}

/// An immutable index over the enabled capabilities.
pub struct SearchIndex {
    docs: Vec<IndexedDoc>,
    rarity: HashMap<String, u64>,
}

impl SearchIndex {
    /// Indexes `docs`; rarity factors are computed over exactly this set.
    pub fn new(docs: &[Document<'_>]) -> Self {
        let indexed: Vec<IndexedDoc> = docs
            .iter()
            .map(|d| {
                let terms: Vec<String> = d.search_terms.iter().flat_map(|t| tokenize(t)).collect();
                let result = SearchResult {
                    name: d.name.to_owned(),
                    signature: d.signature.to_owned(),
                    summary: d.summary.to_owned(),
                };
                IndexedDoc {
                    result_bytes: result_json_bytes(&result),
                    result,
                    lowercase_name: d.name.to_lowercase(),
                    fields: [
                        dedup(tokenize(d.name)),
                        dedup(terms),
                        dedup(tokenize(d.summary)),
                        dedup(tokenize(d.description)),
                    ],
                }
            })
            .collect();
        let mut df: HashMap<&str, u64> = HashMap::new();
        for doc in &indexed {
            let mut union: Vec<&str> = doc.fields.iter().flatten().map(String::as_str).collect();
            union.sort_unstable();
            union.dedup();
            for token in union {
                *df.entry(token).or_default() += 1;
            }
        }
        let n = indexed.len() as u64;
        let rarity = df
            .into_iter()
            .map(|(token, df)| (token.to_owned(), 1 + (n - df) * 7 / n))
            .collect();
        Self {
            docs: indexed,
            rarity,
        }
    }

    /// Ranks every eligible capability for `query` and packs the best prefix under
    /// `max_results` and the response byte bound.
    ///
    /// # Errors
    ///
    /// [`SearchError::QueryLimit`] for more than [`MAX_SEARCH_QUERY_BYTES`] bytes or
    /// [`MAX_QUERY_TOKENS`] distinct tokens.
    pub fn search(&self, query: &str, max_results: usize) -> Result<SearchResponse, SearchError> {
        if query.len() > MAX_SEARCH_QUERY_BYTES {
            return Err(SearchError::QueryLimit);
        }
        let tokens = dedup(tokenize(query));
        if tokens.len() > MAX_QUERY_TOKENS {
            return Err(SearchError::QueryLimit);
        }
        if tokens.is_empty() {
            return Ok(SearchResponse {
                results: Vec::new(),
                truncated: false,
            });
        }
        let exact_query = query.trim().to_lowercase();
        let q = tokens.len() as u64;
        let required = if q <= 2 { q } else { (2 * q).div_ceil(3) };

        // Once per query, not per capability.
        let others: Vec<Vec<String>> = tokens.iter().map(|t| alternatives(t)).collect();
        let mut ranked: Vec<(bool, u64, &IndexedDoc)> = Vec::new();
        for doc in &self.docs {
            let mut raw = 0;
            let mut matched = 0;
            for (token, others) in tokens.iter().zip(&others) {
                let best = self.best_contribution(token, others, doc);
                if best > 0 {
                    raw += best;
                    matched += 1;
                }
            }
            if matched >= required {
                let mut score = raw * matched / q;
                if summary_said(&tokens, &others, &doc.fields[2]) {
                    score = score * SUMMARY_SAID / 2;
                }
                ranked.push((doc.lowercase_name == exact_query, score, doc));
            }
        }
        ranked.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(b.1.cmp(&a.1))
                .then_with(|| a.2.result.name.as_bytes().cmp(b.2.result.name.as_bytes()))
        });

        let mut results = Vec::new();
        let mut used = RESPONSE_OPEN;
        let mut truncated = false;
        for (_, _, doc) in ranked {
            if results.len() == max_results {
                truncated = true;
                break;
            }
            let comma = usize::from(!results.is_empty());
            if used + comma + doc.result_bytes + RESPONSE_CLOSE > MAX_SEARCH_RESPONSE_BYTES {
                truncated = true;
                break;
            }
            used += comma + doc.result_bytes;
            results.push(doc.result.clone());
        }
        Ok(SearchResponse { results, truncated })
    }

    /// The strongest contribution of one query token across the four fields.
    fn best_contribution(&self, token: &str, others: &[String], doc: &IndexedDoc) -> u64 {
        let prefix_ok = token.chars().count() >= 3;
        let mut best = 0;
        for (field, weight) in doc.fields.iter().zip(WEIGHTS) {
            // Within a field: highest quality first, then the rarest token.
            let mut pick: Option<(u64, u64)> = None;
            for candidate in field {
                let quality = if candidate == token {
                    EXACT
                } else if (prefix_ok && candidate.starts_with(token)) || others.contains(candidate)
                {
                    PREFIX
                } else {
                    continue;
                };
                let rarity = self.rarity.get(candidate).copied().unwrap_or(1);
                if pick.is_none_or(|(q, r)| quality > q || (quality == q && rarity > r)) {
                    pick = Some((quality, rarity));
                }
            }
            if let Some((quality, rarity)) = pick {
                best = best.max(weight * rarity * quality);
            }
        }
        best
    }
}

/// Whether the query `tokens` say every token of a `summary` (equal, a query
/// token of at least 3 characters it starts with, or one of the token's
/// [`alternatives`], `others`), and it has one.
fn summary_said(tokens: &[String], others: &[Vec<String>], summary: &[String]) -> bool {
    !summary.is_empty()
        && summary.iter().all(|word| {
            tokens.iter().zip(others).any(|(token, others)| {
                word == token
                    || (token.chars().count() >= 3 && word.starts_with(token.as_str()))
                    || others.contains(word)
            })
        })
}

/// Whether one result alone fits an otherwise empty response (a build-time ceiling).
pub fn fits_alone(result: &SearchResult) -> bool {
    RESPONSE_OPEN + result_json_bytes(result) + RESPONSE_CLOSE <= MAX_SEARCH_RESPONSE_BYTES
}

/// Compact JSON size of `{"name":…,"signature":…,"summary":…}` with Go's
/// `encoding/json` escaping, which the byte bound is defined by.
fn result_json_bytes(result: &SearchResult) -> usize {
    r#"{"name":,"signature":,"summary":}"#.len()
        + codemode_value::json_string_len(&result.name)
        + codemode_value::json_string_len(&result.signature)
        + codemode_value::json_string_len(&result.summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Cap {
        name: &'static str,
        summary: String,
        description: String,
        terms: Vec<String>,
    }

    fn cap(name: &'static str, summary: &str, description: &str, terms: &[&str]) -> Cap {
        Cap {
            name,
            summary: summary.to_owned(),
            description: description.to_owned(),
            terms: terms.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn index(caps: &[Cap]) -> SearchIndex {
        let docs: Vec<Document<'_>> = caps
            .iter()
            .map(|c| Document {
                name: c.name,
                signature: c.name,
                summary: &c.summary,
                description: &c.description,
                search_terms: &c.terms,
            })
            .collect();
        SearchIndex::new(&docs)
    }

    fn names(index: &SearchIndex, query: &str) -> Vec<String> {
        match index.search(query, MAX_SEARCH_RESULTS) {
            Ok(r) => r.results.into_iter().map(|r| r.name).collect(),
            Err(e) => panic!("query {query:?} failed: {e}"),
        }
    }

    #[test]
    fn synonyms_and_singulars_match_and_a_whole_summary_said_ranks_first() {
        let caps = vec![
            cap("gh.repos_get", "Get a repository", "", &[]),
            cap(
                "gh.actions_get_cache_limit_for_repository",
                "Get the cache limit of a repository",
                "",
                &[],
            ),
            cap("gh.pulls_create", "Create a pull request", "", &[]),
            cap("gh.pulls_list", "List pull requests", "", &[]),
            cap("gh.repos_get_content", "Get repository content", "", &[]),
        ];
        let index = index(&caps);
        // Without the bonus the longer name holding both words came first.
        assert_eq!(
            names(&index, "get a repository"),
            [
                "gh.repos_get",
                "gh.actions_get_cache_limit_for_repository",
                "gh.repos_get_content"
            ]
        );
        // `open` also matches `create`, `read` `get`, `contents` `content`.
        assert_eq!(
            names(&index, "open a pull request"),
            ["gh.pulls_create", "gh.pulls_list"]
        );
        assert_eq!(
            names(&index, "read the repository contents"),
            [
                "gh.repos_get_content",
                "gh.actions_get_cache_limit_for_repository",
                "gh.repos_get"
            ]
        );
        assert_eq!(alternatives("repositories"), ["repository"]);
        assert_eq!(alternatives("branches"), ["branch"]);
        assert_eq!(alternatives("open"), ["create", "creates"]);
        for none in ["gas", "status", "class", "analysis"] {
            assert_eq!(alternatives(none), Vec::<String>::new(), "{none}");
        }
    }

    fn catalog() -> Vec<Cap> {
        vec![
            cap(
                "db.mysql.query",
                "Run a MySQL query.",
                "Runs one statement.",
                &["database"],
            ),
            cap(
                "db.sql.format",
                "Format SQL text.",
                "Pretty-prints a statement.",
                &[],
            ),
            cap(
                "github.pulls.create_review",
                "Create a review on a pull request.",
                "Posts a review.",
                &["code review"],
            ),
            cap(
                "files.parse_xml_file",
                "Parse an XML file.",
                "Reads XML.",
                &[],
            ),
            cap(
                "records.lookup",
                "Look up one record by key.",
                "Returns one record.",
                &["find"],
            ),
        ]
    }

    #[test]
    fn sql_does_not_match_mysql_but_mysql_does() {
        let idx = index(&catalog());
        assert_eq!(names(&idx, "sql"), vec!["db.sql.format"]);
        assert_eq!(names(&idx, "mysql"), vec!["db.mysql.query"]);
    }

    #[test]
    fn acronym_split_lets_xml_match() {
        let idx = index(&catalog());
        assert_eq!(names(&idx, "xml"), vec!["files.parse_xml_file"]);
    }

    #[test]
    fn hub_does_not_match_github() {
        let idx = index(&catalog());
        assert_eq!(names(&idx, "hub"), Vec::<String>::new());
    }

    #[test]
    fn prefix_of_three_runes_matches() {
        let idx = index(&catalog());
        assert_eq!(names(&idx, "crea"), vec!["github.pulls.create_review"]);
        assert_eq!(
            names(&idx, "cr"),
            Vec::<String>::new(),
            "two runes never prefix-match"
        );
    }

    #[test]
    fn multi_token_task_query_needs_two_thirds() {
        let idx = index(&catalog());
        // q = 3 → two of three must match: "review" and "pull" do, "rocket" does not.
        assert_eq!(
            names(&idx, "review pull rocket"),
            vec!["github.pulls.create_review"]
        );
        // q = 2 → both must match.
        assert_eq!(names(&idx, "deploy rocket"), Vec::<String>::new());
        assert_eq!(names(&idx, "review rocket"), Vec::<String>::new());
    }

    #[test]
    fn field_precedence_is_name_terms_summary_description() {
        let caps = vec![
            cap("other.describe", "Other thing.", "About alpha.", &[]),
            cap("other.summarize", "Alpha summary.", "Other.", &[]),
            cap("other.terms", "Other.", "Other.", &["alpha"]),
            cap("widget.alpha", "Widget.", "Widget.", &[]),
        ];
        let idx = index(&caps);
        assert_eq!(
            names(&idx, "alpha"),
            vec![
                "widget.alpha",
                "other.terms",
                "other.summarize",
                "other.describe"
            ]
        );
    }

    #[test]
    fn exact_name_ranks_first_case_insensitively() {
        let caps = vec![
            cap(
                "records.lookup_all",
                "Lookup records lookup everything.",
                "records lookup",
                &["records lookup"],
            ),
            cap("records.lookup", "Find one.", "x", &[]),
        ];
        let idx = index(&caps);
        assert_eq!(
            names(&idx, "  Records.Lookup "),
            vec!["records.lookup", "records.lookup_all"]
        );
    }

    #[test]
    fn ties_order_by_name() {
        let caps = vec![
            cap("b.same", "Thing.", "x", &[]),
            cap("a.same", "Thing.", "x", &[]),
        ];
        let idx = index(&caps);
        assert_eq!(names(&idx, "thing"), vec!["a.same", "b.same"]);
    }

    #[test]
    fn rarer_tokens_score_higher() {
        // "report" appears in all three, "quarterly" in one; the rarity factor lifts
        // the capability that matches the rare token.
        let caps = vec![
            cap("a.one", "Report.", "x", &[]),
            cap("b.two", "Report.", "x", &[]),
            cap("c.three", "Quarterly report.", "x", &[]),
        ];
        let idx = index(&caps);
        assert_eq!(names(&idx, "quarterly report"), vec!["c.three"]);
        assert_eq!(names(&idx, "report"), vec!["a.one", "b.two", "c.three"]);
        // Rarity 1 + (3-1)*7/3 = 5 for "quarterly", 1 for "report".
        assert_eq!(idx.rarity.get("quarterly"), Some(&5));
        assert_eq!(idx.rarity.get("report"), Some(&1));
    }

    #[test]
    fn exact_beats_prefix_within_a_field() {
        let caps = vec![
            cap("a.x", "Recordset.", "x", &[]),
            cap("b.x", "Record.", "x", &[]),
        ];
        let idx = index(&caps);
        assert_eq!(names(&idx, "record"), vec!["b.x", "a.x"]);
    }

    #[test]
    fn score_is_raw_times_matched_over_q() {
        let caps = vec![cap("zeta.one", "Alpha beta.", "x", &[])];
        let idx = index(&caps);
        let doc = &idx.docs[0];
        // Single document: every rarity is 1; summary weight 5, exact 100.
        assert_eq!(idx.best_contribution("alpha", &[], doc), 500);
        assert_eq!(idx.best_contribution("alp", &[], doc), 360);
        assert_eq!(idx.best_contribution("zeta", &[], doc), 1200);
    }

    #[test]
    fn blank_connector_and_separator_queries_are_empty_successes() {
        let idx = index(&catalog());
        for query in ["", "   ", "the of and", "...---"] {
            assert_eq!(
                idx.search(query, MAX_SEARCH_RESULTS),
                Ok(SearchResponse {
                    results: vec![],
                    truncated: false
                }),
                "{query:?}"
            );
        }
    }

    #[test]
    fn query_limits_count_raw_bytes_and_distinct_tokens() {
        let idx = index(&catalog());
        let padded = format!("{}x", " ".repeat(MAX_SEARCH_QUERY_BYTES));
        assert_eq!(idx.search(&padded, 20), Err(SearchError::QueryLimit));
        let sixteen: Vec<String> = (0..16)
            .map(|i| format!("w{}x", "a".repeat(i + 1)))
            .collect();
        assert!(idx.search(&sixteen.join(" "), 20).is_ok());
        let seventeen: Vec<String> = (0..17)
            .map(|i| format!("q{}z", "b".repeat(i + 1)))
            .collect();
        assert_eq!(
            idx.search(&seventeen.join(" "), 20),
            Err(SearchError::QueryLimit)
        );
        // Duplicates count once.
        let dupes = vec!["same"; 40].join(" ");
        assert!(
            idx.search(&dupes[..dupes.len().min(MAX_SEARCH_QUERY_BYTES)], 20)
                .is_ok()
        );
    }

    #[test]
    fn count_bound_truncates() {
        let caps: Vec<Cap> = ["a.x", "b.x", "c.x"]
            .iter()
            .map(|n| cap(n, "Widget.", "x", &[]))
            .collect();
        let idx = index(&caps);
        let r = idx.search("widget", 2).map_err(|e| e.to_string());
        assert_eq!(
            r.map(|r| (
                r.results.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
                r.truncated
            )),
            Ok((vec!["a.x".to_string(), "b.x".to_string()], true))
        );
    }

    #[test]
    fn byte_bound_truncates_two_large_summaries_to_one() {
        let big = format!("Widget {}", "w".repeat(40 * 1024));
        let caps = vec![cap("a.x", &big, "x", &[]), cap("b.x", &big, "x", &[])];
        let idx = index(&caps);
        let r = idx
            .search("widget", MAX_SEARCH_RESULTS)
            .map_err(|e| e.to_string());
        assert_eq!(r.map(|r| (r.results.len(), r.truncated)), Ok((1, true)));
    }

    #[test]
    fn go_escaping_counts_html_characters_as_six_bytes() {
        assert_eq!(codemode_value::json_string_len("a<b"), 2 + 1 + 6 + 1);
        assert_eq!(codemode_value::json_string_len("\"\n"), 2 + 2 + 2);
        assert_eq!(codemode_value::json_string_len("é"), 2 + 2);
        assert_eq!(codemode_value::json_string_len("\u{1}"), 2 + 6);
        let r = SearchResult {
            name: "a.b".into(),
            signature: "a.b()".into(),
            summary: "S.".into(),
        };
        assert_eq!(
            result_json_bytes(&r),
            r#"{"name":"a.b","signature":"a.b()","summary":"S."}"#.len()
        );
    }
}

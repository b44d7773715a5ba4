//! Example plugin `records`: a catalog of 300 books to look up, filter and count.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

codemode_sdk::generate!({ world: "plugin", path: "wit", additional_derives: [PartialEq] });

mod data;

use codemode_sdk::Capability;
use exports::example::records::records::{Book, BookFilter, GenreCounts, Guest, QueryResult};

/// Results returned when no limit is given.
const DEFAULT_LIMIT: i64 = 20;
/// Most results one call returns.
const MAX_LIMIT: i64 = 500;
/// Field names `find` accepts.
const FIND_FIELDS: &[&str] = &["author", "country", "genre", "key", "tag", "title", "year"];

struct Records;

impl Guest for Records {
    fn lookup(key: String) -> Result<Book, String> {
        data::books()
            .into_iter()
            .find(|b| b.key == key)
            .ok_or_else(|| {
                format!(
                    "no book has key {key:?}; keys run from \"bk-0001\" to \"bk-{:04}\"",
                    data::BOOKS
                )
            })
    }

    fn query(
        filter: BookFilter,
        tags: Vec<String>,
        limit: Option<i64>,
    ) -> Result<QueryResult, String> {
        let limit = check_limit(limit)?;
        if let Some(range) = filter.published.as_ref().filter(|r| r.from > r.until) {
            return Err(format!(
                "published.from ({}) is after published.until ({})",
                range.from, range.until
            ));
        }
        let author = filter.author.as_deref().map(str::to_lowercase);
        let matches = data::books().into_iter().filter(|b| {
            filter.genre.is_none_or(|g| g == b.genre)
                && author
                    .as_deref()
                    .is_none_or(|a| b.author.name.to_lowercase().contains(a))
                && filter.min_score.is_none_or(|s| b.score >= s)
                && filter
                    .published
                    .as_ref()
                    .is_none_or(|r| (r.from..=r.until).contains(&b.year))
                && tags.iter().all(|t| b.tags.contains(t))
        });
        Ok(page(matches.collect(), limit))
    }

    fn find(fields: Vec<(String, String)>, limit: Option<i64>) -> Result<QueryResult, String> {
        let limit = check_limit(limit)?;
        if let Some((bad, _)) = fields
            .iter()
            .find(|(f, _)| !FIND_FIELDS.contains(&f.as_str()))
        {
            return Err(format!(
                "unknown field {bad:?}; fields are: {}",
                FIND_FIELDS.join(", ")
            ));
        }
        let matches = data::books().into_iter().filter(|b| {
            fields.iter().all(|(field, want)| {
                let eq = |have: &str| have.eq_ignore_ascii_case(want);
                match field.as_str() {
                    "author" => eq(&b.author.name),
                    "country" => eq(&b.author.country),
                    "genre" => eq(data::genre_name(b.genre)),
                    "key" => eq(&b.key),
                    "tag" => b.tags.iter().any(|t| eq(t)),
                    "title" => eq(&b.title),
                    _ => eq(&b.year.to_string()),
                }
            })
        });
        Ok(page(matches.collect(), limit))
    }

    fn genres() -> GenreCounts {
        let mut counts: Vec<(String, u32)> = Vec::new();
        for book in data::books() {
            let name = data::genre_name(book.genre);
            match counts.iter_mut().find(|(g, _)| g == name) {
                Some((_, n)) => *n += 1,
                None => counts.push((name.to_owned(), 1)),
            }
        }
        counts.sort();
        GenreCounts { counts }
    }
}

fn check_limit(limit: Option<i64>) -> Result<usize, String> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(format!(
            "limit must be between 1 and {MAX_LIMIT}, got {limit}"
        ));
    }
    Ok(limit as usize)
}

fn page(mut books: Vec<Book>, limit: usize) -> QueryResult {
    let total = books.len() as u32;
    books.truncate(limit);
    QueryResult {
        total,
        items: books,
    }
}

export!(Records);

codemode_sdk::metadata![
    Capability::new("records.lookup", "Look up one book by its key.")
        .with_description(
            "Returns the book with the given key (\"bk-0001\" to \"bk-0300\"): title, author {name, country, born}, year, genre, tags, score (1.0-5.0) and pages. Fails when no book has the key.",
        )
        .with_search_terms(["book by id", "get record", "fetch book"]),
    Capability::new("records.query", "Query books by genre, author, minimum score, publication years and tags.")
        .with_description(
            "Returns the books matching every given filter field (genre, author substring, min_score, published {from, until} inclusive) and carrying all the given tags, in key order; total counts all matches, items holds at most limit (default 20, at most 500).",
        )
        .with_search_terms(["search books", "filter records", "list books"]),
    Capability::new("records.find", "Find books whose fields equal the given values.")
        .with_description(
            "fields maps field names (author, country, genre, key, tag, title, year) to the value to match exactly, ignoring ASCII case; a book matches when every field matches (tag: any of its tags). Returns total and up to limit items (default 20).",
        )
        .with_search_terms(["match fields", "exact match", "where clause"]),
    Capability::new("records.genres", "Count books per genre.")
        .with_description("Returns a dict from genre name (e.g. \"science-fiction\") to the number of books in it.")
        .with_search_terms(["categories", "genre statistics"]),
];

// Every capability only reads the catalog: a policy that asks before writes
// lets them run.
codemode_sdk::annotations![
    codemode_sdk::Annotated::new("records.lookup")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    codemode_sdk::Annotated::new("records.query")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    codemode_sdk::Annotated::new("records.find")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    codemode_sdk::Annotated::new("records.genres")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_deterministic_and_complete() {
        let books = data::books();
        assert_eq!(books.len(), 300);
        assert_eq!(books[0].key, "bk-0001");
        assert_eq!(books, data::books());
        assert!(
            books
                .iter()
                .all(|b| (1.0..=5.0).contains(&b.score) && !b.tags.is_empty())
        );
    }

    #[test]
    fn lookup_finds_and_explains_misses() {
        assert_eq!(
            Records::lookup("bk-0042".into()).map(|b| b.key),
            Ok("bk-0042".to_string())
        );
        assert_eq!(
            Records::lookup("nope".into()).map(|b| b.key),
            Err("no book has key \"nope\"; keys run from \"bk-0001\" to \"bk-0300\"".to_string())
        );
    }

    #[test]
    fn genre_counts_add_up() {
        let total: u32 = Records::genres().counts.iter().map(|(_, n)| n).sum();
        assert_eq!(total, 300);
    }

    #[test]
    fn limits_are_checked() {
        let none = BookFilter {
            genre: None,
            author: None,
            min_score: None,
            published: None,
        };
        assert_eq!(
            Records::query(none, vec![], Some(0)).map(|r| r.total),
            Err("limit must be between 1 and 500, got 0".to_string())
        );
        assert!(Records::find(vec![("colour".into(), "red".into())], None).is_err());
    }
}

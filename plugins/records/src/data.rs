//! The embedded dataset: 300 books generated deterministically from word lists, so the
//! plugin needs no files and every build holds the same catalog.

use crate::exports::example::records::records::{Author, Book, Genre};

/// Number of books in the catalog.
pub const BOOKS: usize = 300;

const AUTHORS: &[(&str, &str, Option<i32>)] = &[
    ("Amara Okafor", "Nigeria", Some(1971)),
    ("Lena Brandt", "Germany", Some(1958)),
    ("Tomás Ferreira", "Portugal", Some(1983)),
    ("Hiroshi Tanaka", "Japan", Some(1949)),
    ("Claire Dubois", "France", Some(1966)),
    ("Mateo Alvarez", "Argentina", Some(1990)),
    ("Ingrid Solberg", "Norway", Some(1962)),
    ("Rahul Mehta", "India", Some(1975)),
    ("Sofia Rossi", "Italy", Some(1980)),
    ("James Whitfield", "United Kingdom", Some(1944)),
    ("Mei Lin", "China", Some(1987)),
    ("Olga Petrova", "Russia", Some(1953)),
    ("Daniel Cohen", "Israel", Some(1969)),
    ("Aisha Rahman", "Bangladesh", Some(1992)),
    ("Lucas Martin", "Canada", Some(1978)),
    ("Eva Novak", "Czechia", Some(1985)),
    ("Kwame Mensah", "Ghana", Some(1960)),
    ("Grace Miller", "United States", Some(1972)),
    ("Anonymous", "Unknown", None),
    ("Nora Lindqvist", "Sweden", Some(1995)),
    ("Pablo Ortega", "Mexico", Some(1957)),
    ("Yara Haddad", "Lebanon", Some(1981)),
    ("Thomas Byrne", "Ireland", Some(1947)),
    ("Hana Kimura", "Japan", Some(1988)),
];

const ADJECTIVES: &[&str] = &[
    "Silent",
    "Hidden",
    "Last",
    "Burning",
    "Silver",
    "Broken",
    "Northern",
    "Quiet",
    "Distant",
    "Golden",
    "Forgotten",
    "Restless",
    "Glass",
    "Winter",
    "Crimson",
    "Endless",
];

const NOUNS: &[&str] = &[
    "River",
    "Archive",
    "Garden",
    "Lighthouse",
    "Orchard",
    "Harbor",
    "Atlas",
    "Clockmaker",
    "Cartographer",
    "Observatory",
    "Bridge",
    "Kingdom",
    "Letters",
    "Equation",
    "Tide",
    "Forest",
];

const TAGS: &[&str] = &[
    "classic",
    "award-winning",
    "debut",
    "series",
    "translated",
    "illustrated",
    "short",
    "bestseller",
    "historical",
    "coming-of-age",
    "family",
    "travel",
];

const GENRES: &[Genre] = &[
    Genre::Fiction,
    Genre::Mystery,
    Genre::ScienceFiction,
    Genre::Fantasy,
    Genre::History,
    Genre::Biography,
    Genre::Poetry,
    Genre::Science,
];

/// A small deterministic generator (64-bit LCG, Knuth's constants); the catalog is
/// data, not randomness, so the seed is fixed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % bound as u64) as usize
    }
}

/// Builds the whole catalog, in key order.
pub fn books() -> Vec<Book> {
    let mut rng = Lcg(0x5eed_b00c);
    (1..=BOOKS)
        .map(|i| {
            let (name, country, born) = AUTHORS[rng.next(AUTHORS.len())];
            let genre = GENRES[rng.next(GENRES.len())];
            let title = match rng.next(3) {
                0 => format!(
                    "The {} {}",
                    ADJECTIVES[rng.next(ADJECTIVES.len())],
                    NOUNS[rng.next(NOUNS.len())]
                ),
                1 => format!(
                    "{} of the {}",
                    NOUNS[rng.next(NOUNS.len())],
                    NOUNS[rng.next(NOUNS.len())]
                ),
                _ => format!(
                    "A {} for {}",
                    NOUNS[rng.next(NOUNS.len())],
                    name.split(' ').next().unwrap_or(name)
                ),
            };
            let earliest = born.map_or(1900, |b| b + 20);
            let year = earliest + rng.next((2025 - earliest).max(1) as usize) as i32;
            let mut tags: Vec<String> = Vec::new();
            for _ in 0..1 + rng.next(3) {
                let tag = TAGS[rng.next(TAGS.len())].to_owned();
                if !tags.contains(&tag) {
                    tags.push(tag);
                }
            }
            tags.sort();
            Book {
                key: format!("bk-{i:04}"),
                title,
                author: Author {
                    name: name.to_owned(),
                    country: country.to_owned(),
                    born,
                },
                year,
                genre,
                tags,
                score: 1.0 + rng.next(41) as f64 / 10.0,
                pages: 80 + rng.next(900) as u32,
            }
        })
        .collect()
}

/// The WIT spelling of a genre (`science-fiction`).
pub fn genre_name(genre: Genre) -> &'static str {
    match genre {
        Genre::Fiction => "fiction",
        Genre::Mystery => "mystery",
        Genre::ScienceFiction => "science-fiction",
        Genre::Fantasy => "fantasy",
        Genre::History => "history",
        Genre::Biography => "biography",
        Genre::Poetry => "poetry",
        Genre::Science => "science",
    }
}

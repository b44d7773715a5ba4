// The implementation both versions share; the including crate defines `VERSION`.
// Both crates read the same WIT (the path is relative to each crate's manifest).

codemode_sdk::generate!({ world: "plugin", path: "../versioned/wit" });

use exports::test::versioned::versioned::{Guest, Info};

struct Versioned;

impl Guest for Versioned {
    fn version() -> Info {
        Info { version: VERSION }
    }
}

export!(Versioned);

codemode_sdk::metadata![codemode_sdk::Capability::new(
    "versioned.version",
    "Report which build of this test plugin is serving."
)];

//! Test plugin: compiles and describes itself fine, but names its capability
//! `json.echo`, whose first segment is reserved; the host must skip it and say why.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

codemode_sdk::generate!({ world: "plugin", path: "wit" });

use exports::test::misfit::misfit::{Echoed, Guest};

struct Misfit;

impl Guest for Misfit {
    fn echo(text: String) -> Echoed {
        Echoed { text }
    }
}

export!(Misfit);

codemode_sdk::metadata![
    codemode_sdk::Capability::new("misfit.echo", "Echo the text back.").with_name("json.echo")
];

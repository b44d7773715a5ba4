//! Test plugin, version 1: `versioned.version()` returns `{version: 1}`. The tests
//! replace it with `versioned_two` (same capability, `{version: 2}`) under a running
//! server.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

const VERSION: u32 = 1;

include!("plugin.rs");

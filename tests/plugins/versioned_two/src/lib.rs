//! Test plugin, version 2 of `versioned` (see there): `{version: 2}`.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

const VERSION: u32 = 2;

include!("../../versioned/src/plugin.rs");

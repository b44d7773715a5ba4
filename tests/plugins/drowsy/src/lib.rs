//! Test plugin: `describe()` sleeps for an hour in a WASI host call (a clock
//! pollable), where fuel cannot stop it. Loading must give up on it at its deadline,
//! skip it with the reason, and serve the other plugins.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

// The same interface as `sleepy`: only the metadata differs.
codemode_sdk::generate!({ world: "plugin", path: "../sleepy/wit" });

use exports::test::sleepy::sleepy::{Guest, Slept};

struct Drowsy;

impl Guest for Drowsy {
    fn nap(ms: u64) -> Slept {
        Slept { ms }
    }
}

export!(Drowsy);

codemode_sdk::metadata![{
    std::thread::sleep(std::time::Duration::from_secs(3600));
    codemode_sdk::Capability::new("sleepy.nap", "Never listed: describe() does not return.")
        .with_name("drowsy.nap")
}];

//! Test plugin: `sleepy.nap` waits in a WASI host call (`std::thread::sleep` blocks on
//! a monotonic-clock pollable). No wasm runs while it waits, so no epoch deadline or
//! fuel can stop it: only a host that abandons the call can. The host must end the
//! call at the execution's deadline (`resource limit exceeded`), at the plugin's own
//! `timeout` (`capability failed: sleepy.nap timed out`), or when the client goes
//! away, and free the execution's slot either way.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

codemode_sdk::generate!({ world: "plugin", path: "wit" });

use exports::test::sleepy::sleepy::{Guest, Slept};

struct Sleepy;

impl Guest for Sleepy {
    fn nap(ms: u64) -> Slept {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        Slept { ms }
    }
}

export!(Sleepy);

codemode_sdk::metadata![codemode_sdk::Capability::new(
    "sleepy.nap",
    "Sleep in the host for some milliseconds."
),];

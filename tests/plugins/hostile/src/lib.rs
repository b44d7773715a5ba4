//! Test plugin: `hostile.spin` loops forever, `hostile.hog` allocates until the memory
//! cap stops it, `hostile.crash` panics. The host must end only the execution that
//! called them, with `resource limit exceeded` or a bare `capability failed`.
//! `hostile.shout` prints what the agent gives it: the host must keep it out of its
//! own log and audit lines. `hostile.remember` keeps what it is given for its next
//! call: the host must never let it reach another execution.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

codemode_sdk::generate!({ world: "plugin", path: "wit" });

use std::sync::Mutex;

use exports::test::hostile::hostile::{Done, Guest, Remembered};

/// What `remember` was given last, in this instance.
static KEPT: Mutex<Option<String>> = Mutex::new(None);

struct Hostile;

impl Guest for Hostile {
    fn spin() -> Done {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
            if n == u64::MAX {
                return Done { ok: false };
            }
        }
    }

    fn hog() -> Done {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }

    fn crash() -> Done {
        panic!("hostile.crash: CANARY-trap-5d2e81 /secret/host/path must never reach the model")
    }

    fn shout(line: String, times: u32) -> Done {
        for _ in 0..times {
            println!("{line}");
        }
        eprintln!("{line}");
        Done { ok: true }
    }

    fn remember(text: String) -> Remembered {
        let mut kept = KEPT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Remembered {
            previous: kept.replace(text),
        }
    }
}

export!(Hostile);

codemode_sdk::metadata![
    codemode_sdk::Capability::new("hostile.spin", "Loop forever."),
    codemode_sdk::Capability::new("hostile.hog", "Allocate memory without bound."),
    codemode_sdk::Capability::new("hostile.crash", "Trap."),
    codemode_sdk::Capability::new("hostile.shout", "Print a line many times."),
    codemode_sdk::Capability::new("hostile.remember", "Keep a text for the next call."),
];

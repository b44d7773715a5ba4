//! Fuzz target `tokens`: see `codemode_server::fuzzing::tokens`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_server::fuzzing::tokens(data));

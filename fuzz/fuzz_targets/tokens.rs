//! Fuzz target `tokens`: see `codemode_host::fuzzing::tokens`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_host::fuzzing::tokens(data));

//! Fuzz target `catalog`: see `codemode_server::fuzzing::catalog`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_server::fuzzing::catalog(data));

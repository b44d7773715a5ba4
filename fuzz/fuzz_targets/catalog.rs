//! Fuzz target `catalog`: see `codemode_host::fuzzing::catalog`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_host::fuzzing::catalog(data));

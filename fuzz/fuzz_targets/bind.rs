//! Fuzz target `bind`: see `codemode_server::fuzzing::bind_arguments`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_server::fuzzing::bind_arguments(data));

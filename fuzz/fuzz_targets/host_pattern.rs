//! Fuzz target `host_pattern`: see `codemode_server::fuzzing::host_pattern`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_server::fuzzing::host_pattern(data));

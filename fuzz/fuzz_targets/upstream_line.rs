//! Fuzz target `upstream_line`: see `codemode_server::fuzzing::upstream_line`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_server::fuzzing::upstream_line(data));

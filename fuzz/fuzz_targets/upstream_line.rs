//! Fuzz target `upstream_line`: see `codemode_host::fuzzing::upstream_line`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_host::fuzzing::upstream_line(data));

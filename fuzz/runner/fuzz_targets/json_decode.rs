//! Fuzz target `json_decode`: see `codemode_runner::fuzzing::json_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_runner::fuzzing::json_decode(data));

//! Fuzz target `source_checks`: see `codemode_runner::fuzzing::source_checks`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_runner::fuzzing::source_checks(data));

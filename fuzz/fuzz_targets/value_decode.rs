//! Fuzz target `value_decode`: see `codemode_server::fuzzing::value_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_server::fuzzing::value_decode(data));

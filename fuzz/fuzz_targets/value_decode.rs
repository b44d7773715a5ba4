//! Fuzz target `value_decode`: see `codemode_host::fuzzing::value_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_host::fuzzing::value_decode(data));

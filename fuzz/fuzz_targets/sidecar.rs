//! Fuzz target `sidecar`: see `codemode_server::fuzzing::sidecar`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_server::fuzzing::sidecar(data));

//! Fuzz target `sidecar`: see `codemode_host::fuzzing::sidecar`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_host::fuzzing::sidecar(data));

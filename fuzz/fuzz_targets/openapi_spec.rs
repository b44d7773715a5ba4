//! Fuzz target `openapi_spec`: see `codemode_host::fuzzing::openapi_spec`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_host::fuzzing::openapi_spec(data));

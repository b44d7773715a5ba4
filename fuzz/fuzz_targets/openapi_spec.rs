//! Fuzz target `openapi_spec`: see `codemode_server::fuzzing::openapi_spec`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_server::fuzzing::openapi_spec(data));

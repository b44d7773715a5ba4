//! How sizes and durations are written: the runtime crate's `units`. Public here: parsing and formatting them as the flags do, and their bounds.

pub(crate) use codemode_runtime::units::*;
pub use codemode_runtime::units::{
    MAX_DURATION, MAX_DURATION_TEXT, MAX_SIZE, format_bytes, millis, parse_bytes, parse_duration,
};

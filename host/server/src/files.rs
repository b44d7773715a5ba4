//! Files someone else may have put in place, read within their bounds: the runtime crate's `files`. Public here: reading a text file as the server does, and why it was refused.

pub use codemode_runtime::files::{FileError, read_text};

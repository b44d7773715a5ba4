//! The linear memory of every sandbox of the process together: the runtime crate's `memory`. Public here: the default of `--max-total-memory`; the process-wide reservations are the crate's own.

pub use codemode_runtime::memory::default_total;
pub(crate) use codemode_runtime::memory::*;

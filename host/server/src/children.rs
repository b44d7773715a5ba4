//! Child processes that die with the server: the runtime crate's `children`. Public here: what a binary embedding the server calls at start and exit (a subreaper, the orphans ended); the rest is the crate's own.

pub use codemode_runtime::children::{become_subreaper, end_orphans, reap_adopted};

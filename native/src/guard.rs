//! The publication guard (eventguard.txt §4.4, §4.7; narada §V-B): the pure cores, with no
//! PyO3 (fuzzed on their own by native/fuzz/): `guard/core.rs` (the Merkle verifier,
//! EventGuard's and the default profile's guards), `guard/psguard.rs` (PSGuard's) and
//! `guard/narada.rs` (narada's token, window, signature and replay checks); their PyO3 glue
//! in `guard/py.rs`, `guard/psguard_py.rs` and `guard/narada_py.rs`. `guard/routing.rs`
//! decodes the routing parts of PSGuard/default and EventGuard publications (glue and the
//! guards' runs over the core's messages: `guard/routing_py.rs`).
mod batch;
pub mod core;
mod narada;
mod narada_py;
mod psguard;
mod psguard_py;
mod py;
pub mod routing;
mod routing_py;

use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    py::register(m)?;
    routing_py::register(m)?;
    psguard_py::register(m)?;
    narada_py::register(m)
}

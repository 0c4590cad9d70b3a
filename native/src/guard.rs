//! The publication guard (eventguard.txt §4.4, §4.7; narada §V-B): the pure core in
//! `guard/core.rs` (fuzzed on its own by native/fuzz/), its PyO3 glue in `guard/py.rs`;
//! PSGuard's publication guard in `guard/psguard.rs`.
pub mod core;
mod psguard;
mod py;

use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    py::register(m)?;
    psguard::register(m)
}

//! The publication guard (eventguard.txt §4.4, §4.7; narada §V-B): the pure core in
//! `guard/core.rs` (fuzzed on its own by native/fuzz/), its PyO3 glue in `guard/py.rs`.
pub mod core;
mod py;

pub use py::register;

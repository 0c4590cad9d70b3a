//! `pubguard._native`: narrow accelerators under pubguard's Python API.
//!
//! The Python code stays the reference; every function here has a differential test against it,
//! and `PUBGUARD_NATIVE=0` turns this module off.
#![forbid(unsafe_code)]
// The PyO3 entry points mirror the Python reference's signatures (the guard's many fields), and
// the AES-128/256 PRF enum stays unboxed on the token-matching hot path.
#![allow(clippy::too_many_arguments, clippy::large_enum_variant)]

use pyo3::prelude::*;

mod aead;
mod ed25519;
mod guard;
mod hermes;
mod keycache;
mod keys;
mod msgpack;
mod tokens;
mod vcaps;
mod wire;

/// The crate version, so `pubguard --version` can name the backend it runs.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    aead::register(m)?;
    ed25519::register(m)?;
    guard::register(m)?;
    hermes::register(m)?;
    keycache::register(m)?;
    keys::register(m)?;
    tokens::register(m)?;
    vcaps::register(m)?;
    wire::register(m)?;
    Ok(())
}

//! AES-256-GCM in batches: hermes's counter-nonce AEAD (hermes-encrypted-access-control.txt
//! §3.2, §3.5), the twin of `pubguard.crypto.counter_aead.seal_batch` / `open_batch`.
//!
//! The publisher hosting broker seals every attribute of every event of a micro-batch, each
//! under its attribute's key with its own nonce, and a subscriber hosting broker opens them;
//! one call here does a whole micro-batch, so the per-call cost of going through Python
//! (building the nonce, the call into OpenSSL's context, the result's checks) is paid once.
//!
//! The nonce is `0x00000000 || counter` (big-endian, 96 bits), the recipe's construction
//! (`counter_aead.nonce_of`); the output is `ciphertext || tag`, as pyca's `AESGCM`. An item
//! is `(cipher, counter, data, aad)` where `cipher` is a `CounterAead` whose `gcm` attribute
//! holds a [`GcmKey`]. Sealing refuses what the reference refuses (a counter that is not an
//! exact `int` in `[0, 2**64)`, empty associated data, a cipher without a native key) with a
//! `ValueError` / `TypeError`, and the Python wrapper re-runs the reference, which raises the
//! typed error. Opening returns `None` for any item that fails, never which check failed.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyTuple};

const TAG_BYTES: usize = 16;

/// One AES-256-GCM key schedule. Not picklable; the repr shows nothing of the key.
#[pyclass(module = "pubguard._native", frozen)]
pub struct GcmKey {
    pub(crate) cipher: Aes256Gcm,
}

#[pymethods]
impl GcmKey {
    /// `GcmKey(key)`: a 32-byte AES-256 key.
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        if key.len() != 32 {
            return Err(PyValueError::new_err("GcmKey needs a 32-byte key"));
        }
        let cipher = Aes256Gcm::new_from_slice(key)
            .map_err(|_| PyValueError::new_err("AES-256 key rejected"))?;
        Ok(Self { cipher })
    }

    fn __repr__(&self) -> &'static str {
        "GcmKey(<secret>)"
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err("GcmKey is not picklable"))
    }
}

pub(crate) fn nonce(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    n
}

/// The counter of an item: an exact `int` in `[0, 2**64)` (not a `bool`), else None.
fn counter_of(ob: &Bound<'_, PyAny>) -> Option<u64> {
    if !ob.is_exact_instance_of::<PyInt>() {
        return None;
    }
    ob.extract::<u64>().ok()
}

/// The 4-tuple of an item, its key (`item[0].gcm`) and its counter.
fn parts<'py>(
    item: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, GcmKey>, Option<u64>)> {
    let t = item.downcast::<PyTuple>()?.clone();
    if t.len() != 4 {
        return Err(PyValueError::new_err(
            "an AEAD item is (cipher, counter, data, aad)",
        ));
    }
    let gcm = t.get_item(0)?.getattr(intern!(item.py(), "gcm"))?;
    let key = gcm.downcast::<GcmKey>()?.clone();
    let n = counter_of(&t.get_item(1)?);
    Ok((t, key, n))
}

/// `ciphertext || tag` of every `(cipher, counter, plaintext, aad)` item, in order.
#[pyfunction]
fn gcm_seal_batch<'py>(
    py: Python<'py>,
    items: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for item in items.iter() {
        let (t, key, n) = parts(&item)?;
        let Some(n) = n else {
            return Err(PyValueError::new_err("nonce counter out of range"));
        };
        let pt = t.get_item(2)?;
        let pt = pt.downcast::<PyBytes>()?.as_bytes();
        let aad = t.get_item(3)?;
        let aad = aad.downcast::<PyBytes>()?.as_bytes();
        if aad.is_empty() {
            return Err(PyValueError::new_err("associated data is required"));
        }
        let mut buf = Vec::with_capacity(pt.len() + TAG_BYTES);
        buf.extend_from_slice(pt);
        let tag = key
            .get()
            .cipher
            .encrypt_in_place_detached(Nonce::from_slice(&nonce(n)), aad, &mut buf)
            .map_err(|_| PyValueError::new_err("AES-GCM refused the input"))?;
        buf.extend_from_slice(&tag);
        out.append(PyBytes::new(py, &buf))?;
    }
    Ok(out)
}

/// The plaintext of every `(cipher, counter, ciphertext||tag, aad)` item, or None where it
/// fails to authenticate or is malformed; None items stay None.
#[pyfunction]
fn gcm_open_batch<'py>(
    py: Python<'py>,
    items: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for item in items.iter() {
        if item.is_none() {
            out.append(py.None())?;
            continue;
        }
        let (t, key, n) = parts(&item)?;
        let blob = t.get_item(2)?;
        let blob = blob.downcast::<PyBytes>()?.as_bytes();
        let aad = t.get_item(3)?;
        let aad = aad.downcast::<PyBytes>()?.as_bytes();
        let (Some(n), true) = (n, blob.len() >= TAG_BYTES) else {
            out.append(py.None())?;
            continue;
        };
        let (ct, tag) = blob.split_at(blob.len() - TAG_BYTES);
        let mut buf = ct.to_vec();
        let ok = key.get().cipher.decrypt_in_place_detached(
            Nonce::from_slice(&nonce(n)),
            aad,
            &mut buf,
            Tag::from_slice(tag),
        );
        match ok {
            Ok(()) => out.append(PyBytes::new(py, &buf))?,
            Err(_) => out.append(py.None())?,
        }
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<GcmKey>()?;
    m.add_function(wrap_pyfunction!(gcm_seal_batch, m)?)?;
    m.add_function(wrap_pyfunction!(gcm_open_batch, m)?)?;
    Ok(())
}

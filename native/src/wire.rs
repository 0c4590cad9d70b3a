//! Wire decoding's hot check (pubguard/wire/messages.py `_flat_ok`): whether a decoded map is
//! flat, i.e. string keys and scalar values within msgpack's ranges, so the broker freezes it
//! with one copy. Every publication's `routing` and `meta` go through it at every hop; a
//! signed profile's `meta` has about ten fields, which the Python loop checks one by one.
//! The Python function stays the spec (tests/wire/test_flat_native.py compares the two).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString};

/// messages.py MAX_WIRE_ITEMS
const MAX_WIRE_ITEMS: usize = 65_536;

/// `_flat_ok(d)` for a `dict` (exact types, as the Python check compares `type(v)`).
#[pyfunction]
fn flat_ok(d: &Bound<'_, PyDict>) -> bool {
    if d.len() >= MAX_WIRE_ITEMS {
        return false;
    }
    for (k, v) in d.iter() {
        if !k.is_exact_instance_of::<PyString>() {
            return false;
        }
        if v.is_exact_instance_of::<PyString>()
            || v.is_exact_instance_of::<PyBytes>()
            || v.is_exact_instance_of::<PyBool>()
            || v.is_none()
        {
            continue;
        }
        if v.is_exact_instance_of::<PyInt>() {
            // msgpack's range: -(2**63) ..= 2**64 - 1
            if v.extract::<i64>().is_err() && v.extract::<u64>().is_err() {
                return false;
            }
        } else if let Ok(f) = v.downcast_exact::<PyFloat>() {
            if f.value().is_nan() {
                return false;
            }
        } else {
            return false;
        }
    }
    true
}

/// framing.py `publication_fields`: for each message of a frame body, the packed fields of
/// a publication passed on unchanged (`crate::msgpack::publication_fields`) when its bytes are
/// canonical (`crate::msgpack`), else None for it; None for a body the walk does not take.
#[pyfunction]
fn publication_fields<'py>(
    py: Python<'py>,
    body: &[u8],
) -> PyResult<Option<Vec<Option<Bound<'py, PyBytes>>>>> {
    let Some(spans) = crate::msgpack::message_spans(body) else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(spans.len());
    for span in spans {
        let fields = span.and_then(|(a, b)| crate::msgpack::publication_fields(&body[a..b]));
        out.push(match fields {
            Some((count, entries)) => Some(PyBytes::new_with(py, 1 + entries.len(), |buf| {
                buf[0] = count;
                buf[1..].copy_from_slice(entries);
                Ok(())
            })?),
            None => None,
        });
    }
    Ok(Some(out))
}

/// framing.py `message_raws`: each message's bytes in a frame body when they are canonical
/// (`crate::msgpack`), else None for it; None for a body the walk does not take.
#[pyfunction]
fn message_raws<'py>(py: Python<'py>, body: &[u8]) -> Option<Vec<Option<Bound<'py, PyBytes>>>> {
    let spans = crate::msgpack::message_spans(body)?;
    Some(
        spans
            .into_iter()
            .map(|s| s.map(|(a, b)| PyBytes::new(py, &body[a..b])))
            .collect(),
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(flat_ok, m)?)?;
    m.add_function(wrap_pyfunction!(message_raws, m)?)?;
    m.add_function(wrap_pyfunction!(publication_fields, m)?)
}

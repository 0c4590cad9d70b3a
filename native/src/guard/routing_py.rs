//! PyO3 glue of `routing.rs` (the routing parts a broker decodes per publication) and of
//! the guards' runs over the core's decoded publications (`check_msgs`): each publication's
//! fields read here from the `Publish` (and its decoded `TokenEvent`), instead of a tuple
//! per frame built in Python.

use super::routing::{eg_token_count, token_tags, Mode, TOKEN_BYTES};
use pyo3::exceptions::PyKeyError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

/// `routing[key]`, None when it is absent (or the lookup fails otherwise).
fn item<'py>(routing: &Bound<'py, PyAny>, key: &Bound<'py, PyString>) -> Option<Bound<'py, PyAny>> {
    routing.get_item(key).ok()
}

/// psguard/wire.py `parse_routing` on a routing part that is a `dict` or its read-only view
/// (the caller checks the type): `(mode name, nonce, tags)` for `TokenEvent`, or None when
/// the Python function must decide (it refuses the part, or a value is a subclass).
#[pyfunction]
fn token_routing<'py>(
    py: Python<'py>,
    routing: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    if routing.len().ok() != Some(3) {
        return Ok(None);
    }
    let (Some(m), Some(n), Some(t)) = (
        item(routing, intern!(py, "m")),
        item(routing, intern!(py, "n")),
        item(routing, intern!(py, "t")),
    ) else {
        return Ok(None);
    };
    let (Ok(m), Ok(nonce), Ok(packed)) = (
        m.downcast_exact::<PyString>(),
        n.downcast_exact::<PyBytes>(),
        t.downcast_exact::<PyBytes>(),
    ) else {
        return Ok(None);
    };
    let Some(mode) = m.to_str().ok().and_then(Mode::from_wire) else {
        return Ok(None);
    };
    let Some(tags) = token_tags(mode, nonce.as_bytes(), packed.as_bytes()) else {
        return Ok(None);
    };
    let name = match mode {
        Mode::Randomized => intern!(py, "randomized"),
        Mode::Deterministic => intern!(py, "deterministic"),
    };
    debug_assert_eq!(name.to_str().ok(), Some(mode.name()));
    let tags = PyTuple::new(py, tags)?;
    Ok(Some(PyTuple::new(
        py,
        [name.as_any(), nonce.as_any(), tags.as_any()],
    )?))
}

/// eventguard/wire.py `parse_tokens` on a routing part that is a `dict` or its read-only
/// view (the caller checks the type): the tokens, or None when the Python function must
/// decide (it refuses the part, or the blob is a `bytes` subclass).
#[pyfunction]
fn eg_tokens<'py>(
    py: Python<'py>,
    routing: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    if routing.len().ok() != Some(1) {
        return Ok(None);
    }
    let Some(blob) = item(routing, intern!(py, "tokens")) else {
        return Ok(None);
    };
    let Ok(b) = blob.downcast_exact::<PyBytes>() else {
        return Ok(None);
    };
    let Some(n) = eg_token_count(b.as_bytes()) else {
        return Ok(None);
    };
    if n == 1 {
        return Ok(Some(PyTuple::new(py, [b])?)); // the blob itself, as the Python function
    }
    let raw = b.as_bytes();
    let toks = (0..n).map(|i| PyBytes::new(py, &raw[i * TOKEN_BYTES..(i + 1) * TOKEN_BYTES]));
    Ok(Some(PyTuple::new(py, toks)?))
}

/// A token profile's run (default, psguard) as the guards' frames
/// `(event_id, mode, nonce, toks, body, meta)`: from each `Publish` and the `TokenEvent`
/// its routing part decoded to (`toks`: its routing's `t`, None when absent, as
/// `routing.get("t")`).
pub(super) fn token_items<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
    events: &Bound<'py, PyAny>,
) -> PyResult<Vec<[Bound<'py, PyAny>; 6]>> {
    let mut out = Vec::with_capacity(messages.len().unwrap_or(0));
    let mut evs = events.try_iter()?;
    for m in messages.try_iter()? {
        let m = m?;
        let Some(te) = evs.next() else {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "messages and events differ in length",
            ));
        };
        let te = te?;
        let (mode, nonce) = match te.downcast::<PyTuple>() {
            Ok(t) if t.len() >= 2 => (t.get_item(0)?, t.get_item(1)?),
            _ => (
                te.getattr(intern!(py, "mode"))?,
                te.getattr(intern!(py, "nonce"))?,
            ),
        };
        let routing = m.getattr(intern!(py, "routing"))?;
        let toks = match routing.get_item(intern!(py, "t")) {
            Ok(v) => v,
            Err(e) if e.is_instance_of::<PyKeyError>(py) => py.None().into_bound(py),
            Err(e) => return Err(e),
        };
        out.push([
            m.getattr(intern!(py, "event_id"))?,
            mode,
            nonce,
            toks,
            m.getattr(intern!(py, "body"))?,
            m.getattr(intern!(py, "meta"))?,
        ]);
    }
    if evs.next().is_some() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "messages and events differ in length",
        ));
    }
    Ok(out)
}

/// An EventGuard run as its guard's frames `(event_id, profile, routing, body, meta)`,
/// from each `Publish`.
pub(super) fn eg_items<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
) -> PyResult<Vec<[Bound<'py, PyAny>; 5]>> {
    let mut out = Vec::with_capacity(messages.len().unwrap_or(0));
    for m in messages.try_iter()? {
        let m = m?;
        out.push([
            m.getattr(intern!(py, "event_id"))?,
            m.getattr(intern!(py, "profile"))?,
            m.getattr(intern!(py, "routing"))?,
            m.getattr(intern!(py, "body"))?,
            m.getattr(intern!(py, "meta"))?,
        ]);
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(token_routing, m)?)?;
    m.add_function(wrap_pyfunction!(eg_tokens, m)?)
}

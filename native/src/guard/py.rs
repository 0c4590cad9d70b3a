//! PyO3 glue of the publication guard: Python values in, the pure core (`core.rs`) run, a
//! verdict out. Python exceptions raised by the owner's callbacks (a forged permit's
//! `InvalidToken`, a malformed one's `ValidationError`) pass through unchanged, exactly as
//! the Python guard raises them to `guard_check.checked`.

use super::batch::SigBatches;
use super::core::{
    AdPermit, DfEnv, DfGuard, DfMeta, DfPermit, EgEnv, EgGuard, EgMeta, RecordMeta, RootVerifier,
    SigItem, Val, VerifyError, DEFAULT_CACHE_CAPACITY, DEFAULT_MAX_NODES, DIGEST, HOT_CAPACITY,
    MAX_PATH,
};
use super::routing_py::{eg_items, token_items};
use pyo3::exceptions::PyKeyError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PySet, PyString, PyTuple};
use std::collections::{HashMap, HashSet};

static INVALID_TOKEN: GILOnceCell<PyObject> = GILOnceCell::new();

fn invalid_token(py: Python<'_>) -> PyErr {
    let cls = INVALID_TOKEN.get_or_try_init(py, || -> PyResult<PyObject> {
        Ok(py
            .import("pubguard.errors")?
            .getattr("InvalidToken")?
            .unbind())
    });
    match cls.and_then(|c| c.bind(py).call0()) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// Verdicts a strike counts for (guard_check.py `GUARD_STRIKING`).
fn striking(v: &str) -> bool {
    matches!(v, "forged" | "unauthorised" | "malformed" | "revoked")
}

/// `check_run`'s loop, shared by the guards: the verdicts of `frames` (tuples of `arity`
/// items) in order, up to and including the first striking one when `stop_on_strike` (the
/// caller strikes the source and may ban it before the next frame), and up to but excluding
/// a frame that falls back to the Python guard or whose callback raised (that exception is
/// returned with the verdicts). The caller resumes after what it has decided, so the state
/// evolves exactly as one call per frame would leave it.
pub(super) fn run_frames<'py>(
    py: Python<'py>,
    frames: &Bound<'py, PyAny>,
    arity: usize,
    stop_on_strike: bool,
    one: impl FnMut(&[Bound<'py, PyAny>]) -> PyResult<&'static str>,
) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
    let items = frames.try_iter()?.map(|f| frame_items(&f?, arity));
    run_items(py, items, stop_on_strike, one)
}

/// `run_frames` over frames whose items were read already (`routing_py.rs`, `check_msgs`).
pub(super) fn run_items<'py, T: AsRef<[Bound<'py, PyAny>]>>(
    py: Python<'py>,
    frames: impl Iterator<Item = PyResult<T>>,
    stop_on_strike: bool,
    mut one: impl FnMut(&[Bound<'py, PyAny>]) -> PyResult<&'static str>,
) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
    let mut out = Vec::new();
    for items in frames {
        let items = items?;
        match one(items.as_ref()) {
            Ok("fallback") => break,
            Ok(v) => {
                out.push(v);
                if stop_on_strike && striking(v) {
                    break;
                }
            }
            Err(e) => return Ok((out, Some(e.into_value(py).into_any()))),
        }
    }
    Ok((out, None))
}

/// A fresh `object()`: the marker a guard's `meta` lookups give for an absent key.
pub(super) fn missing_marker(py: Python<'_>) -> PyResult<PyObject> {
    Ok(py.import("builtins")?.getattr("object")?.call0()?.unbind())
}

/// A frame's items: a tuple of `arity` values, else a `TypeError`.
pub(super) fn frame_items<'py>(
    f: &Bound<'py, PyAny>,
    arity: usize,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let t = f.downcast::<PyTuple>()?;
    if t.len() != arity {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "a frame is a {arity}-tuple"
        )));
    }
    Ok(t.iter().collect())
}

/// The values of `keys` in a publication's `meta` (a mapping: the core's frozen wire map),
/// `missing` where a key is absent; None when the lookup fails otherwise (the Python guard
/// then decides). On the stack: one publication's handful of fields.
pub(super) fn meta_items<'py, const N: usize>(
    py: Python<'py>,
    meta: &Bound<'py, PyAny>,
    keys: &[&Bound<'py, PyString>; N],
    missing: &Bound<'py, PyAny>,
) -> Option<[Bound<'py, PyAny>; N]> {
    let mut failed = false;
    let vals = std::array::from_fn(|i| {
        if failed {
            return missing.clone(); // no lookup after a failed one
        }
        match meta.get_item(keys[i]) {
            Ok(v) => v,
            Err(e) if e.is_instance_of::<PyKeyError>(py) => missing.clone(),
            Err(_) => {
                failed = true;
                missing.clone()
            }
        }
    });
    (!failed).then_some(vals)
}

/// The `meta` keys of a signed psguard record, in `RecordMeta` order, then `more`.
macro_rules! record_keys {
    ($py:expr, $($more:literal),*) => {
        [
            pyo3::intern!($py, "p"),
            pyo3::intern!($py, "ts"),
            pyo3::intern!($py, "e"),
            pyo3::intern!($py, "h"),
            pyo3::intern!($py, "s"),
            pyo3::intern!($py, "sig"),
            $(pyo3::intern!($py, $more)),*
        ]
    };
}
pub(super) use record_keys;

/// A token profile's frame `(event_id, mode, nonce, toks, body, meta)` (default, psguard),
/// read for the core: the exact-typed parts, the record fields and the `more` keys' values
/// (`more.len()` of them), or None to fall back.
pub(super) struct TokenFrame<'a, const M: usize> {
    pub event_id: &'a str,
    pub mode: &'a str,
    pub nonce: &'a [u8],
    pub body: &'a [u8],
    pub toks: Val<'a>,
    pub rec: RecordMeta<'a>,
    pub more: [Val<'a>; M],
}

/// The items of a `TokenFrame` whose `meta` values were looked up (`meta_items`: the six
/// record fields, then `M` more).
pub(super) fn token_frame<'a, const M: usize>(
    items: &'a [Bound<'_, PyAny>],
    vals: &'a [Bound<'_, PyAny>],
    missing: &Bound<'_, PyAny>,
) -> Option<TokenFrame<'a, M>> {
    if items.len() < 5 || vals.len() != 6 + M {
        return None;
    }
    let (Some(event_id), Some(mode), Some(nonce), Some(body)) = (
        exact_str(&items[0]),
        exact_str(&items[1]),
        exact_bytes(&items[2]),
        exact_bytes(&items[4]),
    ) else {
        return None;
    };
    let v = |i: usize| classify(&vals[i], missing);
    Some(TokenFrame {
        event_id,
        mode,
        nonce,
        body,
        toks: classify(&items[3], missing),
        rec: RecordMeta {
            p: v(0),
            ts: v(1),
            e: v(2),
            h: v(3),
            s: v(4),
            sig: v(5),
        },
        more: std::array::from_fn(|i| v(6 + i)),
    })
}

/// Whether `e` is pubguard's `InvalidToken` (a forged signature).
pub(super) fn is_invalid_token(py: Python<'_>, e: &PyErr) -> bool {
    let cls = INVALID_TOKEN.get_or_try_init(py, || -> PyResult<PyObject> {
        Ok(py
            .import("pubguard.errors")?
            .getattr("InvalidToken")?
            .unbind())
    });
    match cls {
        Ok(c) => e.is_instance(py, c.bind(py)),
        Err(_) => false,
    }
}

/// A wire value as the core sees it (see `core::Val`).
pub(super) fn classify<'a>(v: &'a Bound<'_, PyAny>, missing: &Bound<'_, PyAny>) -> Val<'a> {
    if v.is(missing) {
        return Val::Missing;
    }
    if v.is_none() {
        return Val::Null;
    }
    if let Ok(b) = v.downcast_exact::<PyBytes>() {
        return Val::Bytes(b.as_bytes());
    }
    if let Ok(s) = v.downcast_exact::<PyString>() {
        return match s.to_str() {
            Ok(s) => Val::Str(s),
            Err(_) => Val::Fallback,
        };
    }
    if let Ok(i) = v.downcast_exact::<PyInt>() {
        return match i.extract::<i64>() {
            Ok(i) => Val::Int(i),
            Err(_) => Val::Fallback,
        };
    }
    if let Ok(f) = v.downcast_exact::<PyFloat>() {
        return Val::Float(f.value());
    }
    if v.is_instance_of::<PyBool>() {
        return Val::Other;
    }
    if v.is_instance_of::<PyBytes>()
        || v.is_instance_of::<PyString>()
        || v.is_instance_of::<PyInt>()
        || v.is_instance_of::<PyFloat>()
    {
        return Val::Fallback; // a subclass: the reference's slow path decides
    }
    Val::Other
}

pub(super) fn exact_bytes<'a>(v: &'a Bound<'_, PyAny>) -> Option<&'a [u8]> {
    v.downcast_exact::<PyBytes>().ok().map(|b| b.as_bytes())
}

pub(super) fn exact_str<'a>(v: &'a Bound<'_, PyAny>) -> Option<&'a str> {
    v.downcast_exact::<PyString>()
        .ok()
        .and_then(|s| s.to_str().ok())
}

/// guards.py `SignedRootVerifier` (same API and behaviour; the Python class is the spec).
#[pyclass(module = "pubguard._native", name = "SignedRootVerifier")]
pub struct PyRootVerifier {
    pub inner: RootVerifier,
}

impl PyRootVerifier {
    fn run(
        &mut self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        leaf: &[u8],
        sig: &Bound<'_, PyAny>,
        now: f64,
        index: &Bound<'_, PyAny>,
        size: &Bound<'_, PyAny>,
        path: &[u8],
    ) -> PyResult<PyObject> {
        let sig = exact_bytes(sig).ok_or_else(|| invalid_token(py))?;
        let int = |v: &Bound<'_, PyAny>| -> PyResult<i64> {
            match v
                .downcast_exact::<PyInt>()
                .ok()
                .and_then(|i| i.extract::<i64>().ok())
            {
                Some(i) => Ok(i),
                None => Err(invalid_token(py)),
            }
        };
        let (index, size) = (int(index)?, int(size)?);
        let pk_obj = key.call_method0(intern!(py, "to_bytes"))?;
        let pk: &[u8] = pk_obj.downcast::<PyBytes>()?.as_bytes();
        let check = |msg: &[u8]| -> PyResult<()> {
            key.call_method1("verify", (PyBytes::new(py, sig), PyBytes::new(py, msg)))?;
            Ok(())
        };
        match self
            .inner
            .verify(pk, leaf, sig, now, index, size, path, check)
        {
            Ok(root) => Ok(PyBytes::new(py, &root).into_any().unbind()),
            Err(VerifyError::Forged) => Err(invalid_token(py)),
            Err(VerifyError::Sig(e)) => Err(e),
        }
    }
}

#[pymethods]
impl PyRootVerifier {
    #[new]
    #[pyo3(signature = (tag, *, ttl, capacity = DEFAULT_CACHE_CAPACITY, max_nodes = DEFAULT_MAX_NODES))]
    fn new(tag: &[u8], ttl: f64, capacity: usize, max_nodes: usize) -> Self {
        PyRootVerifier {
            inner: RootVerifier::new(tag, ttl, capacity, max_nodes),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn verify_packed(
        &mut self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        leaf: &[u8],
        sig: &Bound<'_, PyAny>,
        now: f64,
        index: &Bound<'_, PyAny>,
        size: &Bound<'_, PyAny>,
        path: &Bound<'_, PyAny>,
    ) -> PyResult<PyObject> {
        let path = exact_bytes(path).ok_or_else(|| invalid_token(py))?;
        self.run(py, key, leaf, sig, now, index, size, path)
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (key, leaf, sig, *, now, index = None, size = None, path = None))]
    fn verify(
        &mut self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        leaf: &[u8],
        sig: &Bound<'_, PyAny>,
        now: f64,
        index: Option<&Bound<'_, PyAny>>,
        size: Option<&Bound<'_, PyAny>>,
        path: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        let zero = 0i64.into_pyobject(py)?.into_any();
        let one = 1i64.into_pyobject(py)?.into_any();
        let index = index.unwrap_or(&zero);
        let size = size.unwrap_or(&one);
        let packed: Vec<u8> = match path {
            None => Vec::new(),
            Some(p) => match exact_bytes(p) {
                Some(b) => b.to_vec(),
                None => {
                    let mut out = Vec::new();
                    for x in p.try_iter()? {
                        let x = x?;
                        match exact_bytes(&x) {
                            Some(b) if b.len() == DIGEST && out.len() < MAX_PATH * DIGEST * 4 => {
                                out.extend_from_slice(b)
                            }
                            _ => return Err(invalid_token(py)),
                        }
                    }
                    out
                }
            },
        };
        self.run(py, key, leaf, sig, now, index, size, &packed)
    }

    #[getter]
    fn verifications(&self) -> u64 {
        self.inner.verifications
    }
    #[getter]
    fn cached_nodes(&self) -> usize {
        self.inner.cached_nodes()
    }
    #[getter]
    fn cached_trees(&self) -> usize {
        self.inner.cached_trees()
    }
    #[getter]
    fn cached_roots(&self) -> usize {
        self.inner.cached_roots()
    }
    #[getter]
    fn ttl(&self) -> f64 {
        self.inner.ttl
    }
    #[getter]
    fn max_nodes(&self) -> usize {
        self.inner.max_nodes
    }
    #[getter]
    fn tag<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.tag)
    }
}

/// The owner's callbacks, seen by the core as an `EgEnv`.
struct PyEnv<'a, 'py> {
    py: Python<'py>,
    now: f64,
    permit_fields: &'a Bound<'py, PyAny>,
    revoked: &'a Bound<'py, PyAny>,
    key_of: &'a Bound<'py, PyAny>,
    keys: &'a mut HashMap<Vec<u8>, PyObject>,
    batches: &'a SigBatches,
}

impl PyEnv<'_, '_> {
    fn key_obj(&mut self, pk: &[u8]) -> PyResult<PyObject> {
        if let Some(k) = self.keys.get(pk) {
            return Ok(k.clone_ref(self.py));
        }
        let k = self.key_of.call1((PyBytes::new(self.py, pk),))?.unbind();
        if self.keys.len() >= HOT_CAPACITY {
            self.keys.clear();
        }
        self.keys.insert(pk.to_vec(), k.clone_ref(self.py));
        Ok(k)
    }
}

impl EgEnv for PyEnv<'_, '_> {
    type Err = PyErr;

    fn permit(&mut self, blob: &[u8]) -> PyResult<Option<AdPermit>> {
        let r = self
            .permit_fields
            .call1((PyBytes::new(self.py, blob), self.now))?;
        if r.is_none() {
            return Ok(None);
        }
        let t = r.downcast::<PyTuple>()?;
        Ok(Some(AdPermit {
            token: t.get_item(0)?.extract()?,
            subject: t.get_item(1)?.extract()?,
            epoch: t.get_item(2)?.extract::<i64>().ok(),
            publisher_key: t.get_item(3)?.extract()?,
            issued_at: t.get_item(4)?.extract()?,
            expires_at: t.get_item(5)?.extract()?,
        }))
    }

    fn revoked(&mut self, pk: &[u8]) -> PyResult<bool> {
        self.revoked.contains(PyBytes::new(self.py, pk))
    }

    fn key(&mut self, pk: &[u8]) -> PyResult<()> {
        self.key_obj(pk).map(|_| ())
    }

    fn verify(&mut self, pk: &[u8], sig: &[u8], message: &[u8]) -> PyResult<()> {
        let k = self.key_obj(pk)?;
        if self.batches.verified(pk, sig, message) {
            return Ok(()); // verified in its run's batch (batch.rs)
        }
        if self.batches.enabled && crate::ed25519::single(pk, sig, message) {
            return Ok(()); // a lone signature (a Merkle root), natively (ed25519.rs)
        }
        k.bind(self.py).call_method1(
            "verify",
            (PyBytes::new(self.py, sig), PyBytes::new(self.py, message)),
        )?;
        Ok(())
    }
}

/// EventGuard's publication guard (eventguard/broker.py `_check_publish`): one broker
/// scheme's state, sharing its `SignedRootVerifier`.
#[pyclass(module = "pubguard._native", name = "EventGuardPublicationGuard")]
pub struct PyEgGuard {
    inner: EgGuard,
    roots: Py<PyRootVerifier>,
    permit_fields: PyObject,
    revoked: PyObject,
    key_of: PyObject,
    keys: HashMap<Vec<u8>, PyObject>,
    missing: PyObject,
    batches: SigBatches,
}

/// An eventguard frame's `(event_id, profile, routing, body, meta)` read for the core, `f`
/// run on `(event_id, profile, tokens blob, body, meta)`; None when the frame holds what the
/// port hands back (`"fallback"`).
fn with_eg_frame<R>(
    py: Python<'_>,
    missing: &Bound<'_, PyAny>,
    items: &[Bound<'_, PyAny>],
    f: impl FnOnce(&str, &str, &[u8], &[u8], &EgMeta<'_>) -> R,
) -> Option<R> {
    let [event_id, profile, routing, body, meta] = items else {
        return None;
    };
    let (Some(event_id), Some(profile), Some(body)) =
        (exact_str(event_id), exact_str(profile), exact_bytes(body))
    else {
        return None;
    };
    if routing.len().ok() != Some(1) {
        return None;
    }
    let tokens_obj = routing.get_item(intern!(py, "tokens")).ok()?;
    let tokens_blob = exact_bytes(&tokens_obj)?;
    let keys = [
        intern!(py, "p"),
        intern!(py, "e"),
        intern!(py, "ts"),
        intern!(py, "sig"),
        intern!(py, "mi"),
        intern!(py, "mn"),
        intern!(py, "mp"),
        intern!(py, "wk"),
        intern!(py, "ad"),
    ];
    let vals = meta_items(py, meta, &keys, missing)?;
    let v = vals.each_ref().map(|x| classify(x, missing));
    let m = EgMeta {
        p: v[0],
        e: v[1],
        ts: v[2],
        sig: v[3],
        mi: v[4],
        mn: v[5],
        mp: v[6],
        wk: v[7],
        ad: v[8],
    };
    Some(f(event_id, profile, tokens_blob, body, &m))
}

/// A single-signature publication's `meta` (no Merkle size, or 1), looked up first so that
/// the batch pre-pass costs one lookup on a Merkle-batched frame.
fn single_signature(py: Python<'_>, meta: &Bound<'_, PyAny>, missing: &Bound<'_, PyAny>) -> bool {
    match meta_items(py, meta, &[intern!(py, "mn")], missing) {
        Some(v) => matches!(classify(&v[0], missing), Val::Missing | Val::Int(1)),
        None => false,
    }
}

/// The batch pre-pass over a run (`batch.rs`): `item(frame items)` is the signature a check
/// would verify on that frame (reading only), each distinct untried signature of a
/// single-signature frame is collected, and the run's batch is verified without the GIL.
fn prepass<'py>(
    py: Python<'py>,
    batches: &mut SigBatches,
    frames: &Bound<'py, PyAny>,
    arity: usize,
    meta_at: usize,
    missing: &Bound<'py, PyAny>,
    item: impl FnMut(&[Bound<'py, PyAny>]) -> Option<SigItem>,
) -> PyResult<()> {
    let mut parts: Vec<Vec<Bound<'py, PyAny>>> = Vec::new();
    for f in frames.try_iter()? {
        let Ok(t) = f?.downcast_into::<PyTuple>() else {
            break;
        };
        if t.len() != arity {
            break;
        }
        parts.push(t.iter().collect());
    }
    prepass_items(py, batches, &parts, meta_at, missing, item)
}

/// `prepass` over frames whose items were read already (`check_msgs`).
pub(super) fn prepass_items<'py, T: AsRef<[Bound<'py, PyAny>]>>(
    py: Python<'py>,
    batches: &mut SigBatches,
    frames: &[T],
    meta_at: usize,
    missing: &Bound<'py, PyAny>,
    mut item: impl FnMut(&[Bound<'py, PyAny>]) -> Option<SigItem>,
) -> PyResult<()> {
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    for parts in frames {
        let parts = parts.as_ref();
        if parts.len() <= meta_at || !single_signature(py, &parts[meta_at], missing) {
            continue;
        }
        if let Some(it) = item(parts) {
            if batches.untried(&it.sig) && seen.insert(it.sig.clone()) {
                items.push(it);
            }
        }
    }
    if items.len() >= super::batch::BATCH_MIN {
        py.allow_threads(|| batches.run(items));
    }
    Ok(())
}

impl PyEgGuard {
    #[allow(clippy::too_many_arguments)]
    fn check_one(
        &mut self,
        py: Python<'_>,
        event_id: &Bound<'_, PyAny>,
        profile: &Bound<'_, PyAny>,
        routing: &Bound<'_, PyAny>,
        body: &Bound<'_, PyAny>,
        meta: &Bound<'_, PyAny>,
        now: f64,
    ) -> PyResult<&'static str> {
        let missing = self.missing.clone_ref(py).into_bound(py);
        let items = [
            event_id.clone(),
            profile.clone(),
            routing.clone(),
            body.clone(),
            meta.clone(),
        ];
        let mut env = PyEnv {
            py,
            now,
            permit_fields: self.permit_fields.bind(py),
            revoked: self.revoked.bind(py),
            key_of: self.key_of.bind(py),
            keys: &mut self.keys,
            batches: &self.batches,
        };
        let mut roots = self.roots.bind(py).borrow_mut();
        let inner = &mut self.inner;
        let got = with_eg_frame(py, &missing, &items, |eid, prof, toks, body, m| {
            inner.check(&mut roots.inner, &mut env, eid, prof, toks, body, m, now)
        });
        match got {
            None => Ok("fallback"),
            Some(v) => Ok(v?.as_str()),
        }
    }

    /// The batch pre-pass over a run of frames (`batch.rs`).
    fn batch(&mut self, py: Python<'_>, frames: &Bound<'_, PyAny>, now: f64) -> PyResult<()> {
        let missing = self.missing.clone_ref(py).into_bound(py);
        let roots = self.roots.bind(py).borrow();
        let inner = &self.inner;
        prepass(py, &mut self.batches, frames, 5, 4, &missing, |items| {
            with_eg_frame(py, &missing, items, |eid, prof, toks, body, m| {
                inner.batch_item(&roots.inner, eid, prof, toks, body, m, now)
            })
            .flatten()
        })
    }

    /// `batch` over frames read from the core's publications (`check_msgs`).
    fn batch_items(
        &mut self,
        py: Python<'_>,
        frames: &[[Bound<'_, PyAny>; 5]],
        now: f64,
    ) -> PyResult<()> {
        let missing = self.missing.clone_ref(py).into_bound(py);
        let roots = self.roots.bind(py).borrow();
        let inner = &self.inner;
        prepass_items(py, &mut self.batches, frames, 4, &missing, |items| {
            with_eg_frame(py, &missing, items, |eid, prof, toks, body, m| {
                inner.batch_item(&roots.inner, eid, prof, toks, body, m, now)
            })
            .flatten()
        })
    }
}

#[pymethods]
impl PyEgGuard {
    /// `permit_fields(blob, now)`: the MS-verified advertisement permit's `(token, subject,
    /// epoch, publisher_key, issued_at, expires_at)`, None for another kind, raising as the
    /// scheme's `permit`; `revoked`: the scheme's set of revoked keys (read live); `key_of(pk)`:
    /// the publisher's `VerifyKey`.
    #[new]
    /// `batch_verify`: try a run's single signatures as one Ed25519 batch (`batch.rs`).
    #[pyo3(signature = (roots, *, max_delay, leaf_tag, permit_fields, revoked, key_of, batch_verify = true))]
    fn new(
        py: Python<'_>,
        roots: Py<PyRootVerifier>,
        max_delay: f64,
        leaf_tag: &[u8],
        permit_fields: PyObject,
        revoked: PyObject,
        key_of: PyObject,
        batch_verify: bool,
    ) -> PyResult<Self> {
        let missing = missing_marker(py)?;
        Ok(PyEgGuard {
            inner: EgGuard::new(max_delay, leaf_tag),
            roots,
            permit_fields,
            revoked,
            key_of,
            keys: HashMap::new(),
            missing,
            batches: SigBatches::new(batch_verify),
        })
    }

    /// Signatures verified in Ed25519 batches (the rest were checked alone).
    #[getter]
    fn batch_verified(&self) -> u64 {
        self.batches.verified
    }

    /// The scheme's verifier this guard shares.
    #[getter]
    fn roots(&self, py: Python<'_>) -> Py<PyRootVerifier> {
        self.roots.clone_ref(py)
    }

    /// The verdict on one publication: "" to pass, a drop reason's value, or "fallback"
    /// (the Python guard decides; nothing was changed).
    #[allow(clippy::too_many_arguments)]
    fn check_publish(
        &mut self,
        py: Python<'_>,
        event_id: &Bound<'_, PyAny>,
        profile: &Bound<'_, PyAny>,
        routing: &Bound<'_, PyAny>,
        body: &Bound<'_, PyAny>,
        meta: &Bound<'_, PyAny>,
        now: f64,
    ) -> PyResult<&'static str> {
        self.check_one(py, event_id, profile, routing, body, meta, now)
    }

    /// `check_publish` over a batch of `(event_id, profile, routing, body, meta)` frames in
    /// order (one call per batch); a callback's exception ends the batch.
    fn check_batch(
        &mut self,
        py: Python<'_>,
        frames: &Bound<'_, PyAny>,
        now: f64,
    ) -> PyResult<Vec<&'static str>> {
        let mut out = Vec::new();
        for f in frames.try_iter()? {
            let t = frame_items(&f?, 5)?;
            out.push(self.check_one(py, &t[0], &t[1], &t[2], &t[3], &t[4], now)?);
        }
        Ok(out)
    }

    /// The verdicts of a run of `(event_id, profile, routing, body, meta)` frames in one
    /// call, stopping as `run_frames` says: `(verdicts, exception)`, where the frame after
    /// the verdicts (if any) fell back (no exception) or raised (the exception).
    #[pyo3(signature = (frames, now, *, stop_on_strike))]
    fn check_run(
        &mut self,
        py: Python<'_>,
        frames: &Bound<'_, PyAny>,
        now: f64,
        stop_on_strike: bool,
    ) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
        if self.batches.enabled {
            self.batch(py, frames, now)?;
        }
        run_frames(py, frames, 5, stop_on_strike, |t| {
            self.check_one(py, &t[0], &t[1], &t[2], &t[3], &t[4], now)
        })
    }

    /// `check_run` on the core's run of `Publish` messages themselves: each one's
    /// `(event_id, profile, routing, body, meta)` read here (`routing_py.rs`), not packed
    /// into a tuple per frame in Python; the same verdicts and state.
    #[pyo3(signature = (messages, now, *, stop_on_strike))]
    fn check_msgs(
        &mut self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        now: f64,
        stop_on_strike: bool,
    ) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
        let frames = eg_items(py, messages)?;
        if self.batches.enabled {
            self.batch_items(py, &frames, now)?;
        }
        run_items(py, frames.into_iter().map(Ok), stop_on_strike, |t| {
            self.check_one(py, &t[0], &t[1], &t[2], &t[3], &t[4], now)
        })
    }
}

/// The default profile's callbacks, seen by the core as a `DfEnv`.
struct PyDfEnv<'a, 'py> {
    py: Python<'py>,
    now: f64,
    broker_id: &'a Bound<'py, PyAny>,
    permit_fields: &'a Bound<'py, PyAny>,
    revoked_keys: &'a Bound<'py, PyAny>,
    revoked_serials: &'a Bound<'py, PyAny>,
    replay: &'a Bound<'py, PyAny>,
    /// the replay state's containers for this run (`ReplayState.run_state`), if any
    run: Option<&'a RunReplay<'py>>,
    /// permit blob -> its Python objects
    objs: &'a mut HashMap<Vec<u8>, DfObjs>,
    /// the last permit blob `revoked` was asked about, with its key and serial objects
    last: &'a mut Option<LastPermit>,
    batches: &'a SigBatches,
}

/// The objects `revoked` reads of the last permit it was asked about.
struct LastPermit {
    blob: Vec<u8>,
    key: PyObject,
    serial: PyObject,
}

/// A verified permit's Python objects: its parsed key, the key's bytes (raw, and as the
/// permit's `bytes`), and its certificate serial.
struct DfObjs {
    verify_key: PyObject,
    raw: Vec<u8>,
    key: PyObject,
    serial: PyObject,
}

impl DfEnv for PyDfEnv<'_, '_> {
    type Err = PyErr;

    fn permit(&mut self, blob: &[u8]) -> PyResult<DfPermit> {
        let r = self
            .permit_fields
            .call1((PyBytes::new(self.py, blob), self.now))?;
        let t = r.downcast::<PyTuple>()?;
        let p = DfPermit {
            publish: t.get_item(0)?.extract()?,
            subject: t.get_item(1)?.extract()?,
            key: t.get_item(2)?.extract()?,
            epoch: t.get_item(3)?.extract::<i64>().ok(),
            not_before: t.get_item(4)?.extract()?,
            not_after: t.get_item(5)?.extract()?,
            digest: t.get_item(6)?.extract()?,
        };
        if self.objs.len() >= HOT_CAPACITY {
            self.objs.clear();
        }
        self.objs.insert(
            blob.to_vec(),
            DfObjs {
                verify_key: t.get_item(8)?.unbind(),
                raw: p.key.clone(),
                key: t.get_item(2)?.unbind(),
                serial: t.get_item(9)?.unbind(),
            },
        );
        Ok(p)
    }

    /// `p.key in revoked or p.serial in revoked_serials`, on the scheme's live sets (a
    /// run's one permit compared, not hashed, for each publication).
    fn revoked(&mut self, blob: &[u8]) -> PyResult<bool> {
        if !matches!(&*self.last, Some(l) if l.blob.as_slice() == blob) {
            let py = self.py;
            let o = self.objs_of(blob)?;
            let (key, serial) = (o.key.clone_ref(py), o.serial.clone_ref(py));
            *self.last = Some(LastPermit {
                blob: blob.to_vec(),
                key,
                serial,
            });
        }
        let Some(l) = &*self.last else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "permit objects missing",
            ));
        };
        Ok(self.revoked_keys.contains(l.key.bind(self.py))?
            || self.revoked_serials.contains(l.serial.bind(self.py))?)
    }

    fn verify(&mut self, blob: &[u8], sig: &[u8], message: &[u8]) -> PyResult<()> {
        let (py, batches) = (self.py, self.batches);
        let o = self.objs_of(blob)?;
        if batches.verified(&o.raw, sig, message) {
            return Ok(()); // verified in its run's batch (batch.rs)
        }
        if batches.enabled && crate::ed25519::single(&o.raw, sig, message) {
            return Ok(()); // a lone signature (a Merkle root), natively (ed25519.rs)
        }
        o.verify_key.bind(py).call_method1(
            intern!(py, "verify"),
            (PyBytes::new(py, sig), PyBytes::new(py, message)),
        )?;
        Ok(())
    }

    fn replayed(&mut self, key: &[u8], ts: i64, seq: i64) -> PyResult<bool> {
        if let Some((mem, dirty)) = self.run {
            // replay.py `check_and_accept`'s common case on its own containers: refused
            // unless after the entity's last accepted (ts, seq); accepted, it is marked to
            // be flushed with the broker's batch (narada §V-B)
            let k = PyTuple::new(
                self.py,
                [
                    self.broker_id.clone(),
                    PyBytes::new(self.py, key).into_any(),
                ],
            )?;
            // None: a stored value the port does not model; Some(None): no message yet
            let last = match mem.get_item(&k)? {
                Some(prev) if !prev.is_none() => prev.extract::<(i64, i64)>().ok().map(Some),
                _ => Some(None),
            };
            if let Some(last) = last {
                if last.is_some_and(|last| (ts, seq) <= last) {
                    return Ok(true);
                }
                mem.set_item(&k, (ts, seq))?;
                if let Some(d) = dirty {
                    d.add(&k)?;
                }
                return Ok(false);
            } // a stored value the port does not model: the Python method decides
        }
        let r = self
            .replay
            .call1((self.broker_id, PyBytes::new(self.py, key), ts, seq))?;
        Ok(!r.is_none())
    }
}

/// The replay state's containers for a run: `(last (ts, seq) by (scope, entity), the
/// entities to flush or None)`.
type RunReplay<'py> = (Bound<'py, PyDict>, Option<Bound<'py, PySet>>);

impl PyDfEnv<'_, '_> {
    /// The permit's objects (asked again if dropped with the bounded map: the scheme's
    /// cache answers), found with one lookup when present.
    fn objs_of(&mut self, blob: &[u8]) -> PyResult<&DfObjs> {
        if !self.objs.contains_key(blob) {
            self.permit(blob)?;
        }
        self.objs
            .get(blob)
            .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("permit objects missing"))
    }
}

/// The default profile's publication guard (default/broker.py `_check_publish`): one broker
/// scheme's state, sharing its `SignedRootVerifier`.
#[pyclass(module = "pubguard._native", name = "DefaultPublicationGuard")]
pub struct PyDfGuard {
    inner: DfGuard,
    roots: Py<PyRootVerifier>,
    permit_fields: PyObject,
    revoked_keys: PyObject,
    revoked_serials: PyObject,
    replay: PyObject,
    replay_state: Option<PyObject>,
    objs: HashMap<Vec<u8>, DfObjs>,
    last: Option<LastPermit>,
    missing: PyObject,
    batches: SigBatches,
}

#[pymethods]
impl PyDfGuard {
    /// `permit_fields(blob, now)`: the verified publish permit's `(is_publish, subject, key,
    /// epoch, not_before, not_after, H(blob), permit, parsed key, certificate serial)`,
    /// raising as the scheme's `permit`; `revoked_keys`, `revoked_serials`: the scheme's
    /// sets of revoked publisher keys and certificate serials (read live: a permit is
    /// revoked when its key or serial is in them); `replay(broker_id, key, ts, seq)`: the
    /// replay state's `check_and_accept`; `replay_state(broker_id)`: its `run_state`, the
    /// containers a run then reads and updates itself (None: `replay` per publication).
    #[new]
    /// `batch_verify`: try a run's single signatures as one Ed25519 batch (`batch.rs`).
    #[pyo3(signature = (roots, *, max_delay, permit_fields, revoked_keys, revoked_serials, replay, replay_state = None, batch_verify = true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        roots: Py<PyRootVerifier>,
        max_delay: f64,
        permit_fields: PyObject,
        revoked_keys: PyObject,
        revoked_serials: PyObject,
        replay: PyObject,
        replay_state: Option<PyObject>,
        batch_verify: bool,
    ) -> PyResult<Self> {
        let missing = missing_marker(py)?;
        Ok(PyDfGuard {
            inner: DfGuard::new(max_delay),
            roots,
            permit_fields,
            revoked_keys,
            revoked_serials,
            replay,
            replay_state,
            objs: HashMap::new(),
            last: None,
            missing,
            batches: SigBatches::new(batch_verify),
        })
    }

    #[getter]
    fn roots(&self, py: Python<'_>) -> Py<PyRootVerifier> {
        self.roots.clone_ref(py)
    }

    /// Signatures verified in Ed25519 batches (the rest were checked alone).
    #[getter]
    fn batch_verified(&self) -> u64 {
        self.batches.verified
    }

    /// The verdict on one publication whose routing part decoded to `(mode, nonce)` with
    /// tags `toks`: "" to pass, a drop reason's value, or "fallback" (nothing was changed).
    #[allow(clippy::too_many_arguments)]
    fn check_publish(
        &mut self,
        py: Python<'_>,
        event_id: Bound<'_, PyAny>,
        mode: Bound<'_, PyAny>,
        nonce: Bound<'_, PyAny>,
        toks: Bound<'_, PyAny>,
        body: Bound<'_, PyAny>,
        meta: Bound<'_, PyAny>,
        now: f64,
        broker_id: &Bound<'_, PyAny>,
    ) -> PyResult<&'static str> {
        self.check_frame(
            py,
            &[event_id, mode, nonce, toks, body, meta],
            now,
            broker_id,
            None,
        )
    }

    /// The verdicts of a run of `(event_id, mode, nonce, toks, body, meta)` frames from one
    /// broker in one call, stopping as `run_frames` says (see the eventguard guard's).
    #[pyo3(signature = (frames, now, broker_id, *, stop_on_strike))]
    fn check_run(
        &mut self,
        py: Python<'_>,
        frames: &Bound<'_, PyAny>,
        now: f64,
        broker_id: &Bound<'_, PyAny>,
        stop_on_strike: bool,
    ) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
        if self.batches.enabled {
            self.batch(py, frames, now)?;
        }
        let run = self.run_replay(py, broker_id)?;
        run_frames(py, frames, 6, stop_on_strike, |t| {
            self.check_frame(py, t, now, broker_id, run.as_ref())
        })
    }

    /// `check_run` on the core's run of `Publish` messages and the `TokenEvent`s their
    /// routing parts decoded to: each frame's items read here (`routing_py.rs`), not
    /// packed into a tuple per frame in Python; the same verdicts and state.
    #[pyo3(signature = (messages, events, now, broker_id, *, stop_on_strike))]
    fn check_msgs(
        &mut self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        events: &Bound<'_, PyAny>,
        now: f64,
        broker_id: &Bound<'_, PyAny>,
        stop_on_strike: bool,
    ) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
        let frames = token_items(py, messages, events)?;
        if self.batches.enabled {
            self.batch_items(py, &frames, now)?;
        }
        let run = self.run_replay(py, broker_id)?;
        run_items(py, frames.into_iter().map(Ok), stop_on_strike, |t| {
            self.check_frame(py, t, now, broker_id, run.as_ref())
        })
    }
}

/// A default frame `(event_id, mode, nonce, toks, body, meta)` read for the core, `f` run on
/// it; None when the frame holds what the port hands back (`"fallback"`).
fn with_df_frame<R>(
    py: Python<'_>,
    missing: &Bound<'_, PyAny>,
    items: &[Bound<'_, PyAny>],
    f: impl FnOnce(&TokenFrame<'_, 5>, &DfMeta<'_>) -> R,
) -> Option<R> {
    let keys = record_keys!(py, "pm", "q", "mi", "mn", "mp");
    let vals = meta_items(py, items.get(5)?, &keys, missing)?;
    let fr = token_frame::<5>(items, &vals, missing)?;
    let m = DfMeta {
        rec: fr.rec,
        pm: fr.more[0],
        q: fr.more[1],
        mi: fr.more[2],
        mn: fr.more[3],
        mp: fr.more[4],
    };
    Some(f(&fr, &m))
}

impl PyDfGuard {
    /// The replay state's containers for a run of `broker_id`'s (`replay_state`), or None
    /// (the `replay` callback per publication).
    fn run_replay<'py>(
        &self,
        py: Python<'py>,
        broker_id: &Bound<'py, PyAny>,
    ) -> PyResult<Option<RunReplay<'py>>> {
        let Some(f) = &self.replay_state else {
            return Ok(None);
        };
        let r = f.bind(py).call1((broker_id,))?;
        if r.is_none() {
            return Ok(None);
        }
        let (mem, dirty): (Bound<'py, PyDict>, Option<Bound<'py, PySet>>) = r.extract()?;
        Ok(Some((mem, dirty)))
    }

    /// `check_publish` on a frame's items.
    fn check_frame(
        &mut self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        now: f64,
        broker_id: &Bound<'_, PyAny>,
        run: Option<&RunReplay<'_>>,
    ) -> PyResult<&'static str> {
        let missing = self.missing.clone_ref(py).into_bound(py);
        let mut env = PyDfEnv {
            py,
            now,
            broker_id,
            permit_fields: self.permit_fields.bind(py),
            revoked_keys: self.revoked_keys.bind(py),
            revoked_serials: self.revoked_serials.bind(py),
            replay: self.replay.bind(py),
            run,
            objs: &mut self.objs,
            last: &mut self.last,
            batches: &self.batches,
        };
        let mut roots = self.roots.bind(py).borrow_mut();
        let inner = &mut self.inner;
        let got = with_df_frame(py, &missing, items, |f, m| {
            let (eid, mode, nonce, toks, body) = (f.event_id, f.mode, f.nonce, f.toks, f.body);
            inner.check(
                &mut roots.inner,
                &mut env,
                eid,
                mode,
                nonce,
                toks,
                body,
                m,
                now,
            )
        });
        match got {
            None => Ok("fallback"),
            Some(v) => Ok(v?.as_str()),
        }
    }

    /// The batch pre-pass over a run of frames (`batch.rs`).
    fn batch(&mut self, py: Python<'_>, frames: &Bound<'_, PyAny>, now: f64) -> PyResult<()> {
        let missing = self.missing.clone_ref(py).into_bound(py);
        let roots = self.roots.bind(py).borrow();
        let inner = &self.inner;
        prepass(py, &mut self.batches, frames, 6, 5, &missing, |items| {
            with_df_frame(py, &missing, items, |f, m| {
                let (eid, mode, nonce, toks, body) = (f.event_id, f.mode, f.nonce, f.toks, f.body);
                inner.batch_item(&roots.inner, eid, mode, nonce, toks, body, m, now)
            })
            .flatten()
        })
    }

    /// `batch` over frames read from the core's publications (`check_msgs`).
    fn batch_items(
        &mut self,
        py: Python<'_>,
        frames: &[[Bound<'_, PyAny>; 6]],
        now: f64,
    ) -> PyResult<()> {
        let missing = self.missing.clone_ref(py).into_bound(py);
        let roots = self.roots.bind(py).borrow();
        let inner = &self.inner;
        prepass_items(py, &mut self.batches, frames, 5, &missing, |items| {
            with_df_frame(py, &missing, items, |f, m| {
                let (eid, mode, nonce, toks, body) = (f.event_id, f.mode, f.nonce, f.toks, f.body);
                inner.batch_item(&roots.inner, eid, mode, nonce, toks, body, m, now)
            })
            .flatten()
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRootVerifier>()?;
    m.add_class::<PyEgGuard>()?;
    m.add_class::<PyDfGuard>()?;
    Ok(())
}

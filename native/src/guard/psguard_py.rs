//! PyO3 glue of PSGuard's publication guard (`psguard.rs`): the scheme's live publishers
//! and revoked names as a `PsEnv`, frames in, verdicts out.

use super::psguard::{check, PsEnv, PsMeta};
use super::py::{
    is_invalid_token, meta_items, missing_marker, record_keys, run_frames, run_items, token_frame,
    PyRootVerifier,
};
use super::routing_py::token_items;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The scheme's callbacks, seen by the core as a `PsEnv`: its live `publishers` dict and
/// `revoked` names set, and the current publisher's `VerifyKey`.
struct PyPsEnv<'a, 'py> {
    py: Python<'py>,
    publishers: &'a Bound<'py, PyAny>,
    revoked: &'a Bound<'py, PyAny>,
    key: Option<Bound<'py, PyAny>>,
}

impl PsEnv for PyPsEnv<'_, '_> {
    type Err = PyErr;

    fn key(&mut self, publisher: &str) -> PyResult<Option<Vec<u8>>> {
        let k = self
            .publishers
            .call_method1(intern!(self.py, "get"), (publisher,))?;
        if k.is_none() {
            self.key = None;
            return Ok(None);
        }
        let raw = k.call_method0(intern!(self.py, "to_bytes"))?;
        let raw = raw.downcast::<PyBytes>()?.as_bytes().to_vec();
        self.key = Some(k);
        Ok(Some(raw))
    }

    fn revoked(&mut self, publisher: &str) -> PyResult<bool> {
        self.revoked.contains(publisher)
    }

    fn valid(&mut self, sig: &[u8], message: &[u8]) -> PyResult<bool> {
        let k = self.key.as_ref().expect("a key was found");
        k.call_method1(
            intern!(self.py, "is_valid"),
            (PyBytes::new(self.py, sig), PyBytes::new(self.py, message)),
        )?
        .is_truthy()
    }

    fn verify(&mut self, sig: &[u8], message: &[u8]) -> PyResult<()> {
        let k = self.key.as_ref().expect("a key was found");
        k.call_method1(
            intern!(self.py, "verify"),
            (PyBytes::new(self.py, sig), PyBytes::new(self.py, message)),
        )?;
        Ok(())
    }

    fn forged(&self, e: &PyErr) -> bool {
        is_invalid_token(self.py, e)
    }
}

/// PSGuard's publication guard (psguard/broker.py `broker_check`, profile `psguard`): one
/// broker scheme's, sharing its `SignedRootVerifier`, reading its publishers and revoked
/// names live.
#[pyclass(module = "pubguard._native", name = "PSGuardPublicationGuard")]
pub struct PyPsGuard {
    roots: Py<PyRootVerifier>,
    publishers: PyObject,
    revoked: PyObject,
    max_delay_ms: i64,
    missing: PyObject,
}

#[pymethods]
impl PyPsGuard {
    /// `publishers`: the scheme's name -> `VerifyKey` dict; `revoked`: its set of revoked
    /// names (both read live).
    #[new]
    #[pyo3(signature = (roots, *, max_delay_ms, publishers, revoked))]
    fn new(
        py: Python<'_>,
        roots: Py<PyRootVerifier>,
        max_delay_ms: i64,
        publishers: PyObject,
        revoked: PyObject,
    ) -> PyResult<Self> {
        let missing = missing_marker(py)?;
        Ok(PyPsGuard {
            roots,
            publishers,
            revoked,
            max_delay_ms,
            missing,
        })
    }

    #[getter]
    fn roots(&self, py: Python<'_>) -> Py<PyRootVerifier> {
        self.roots.clone_ref(py)
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
    ) -> PyResult<&'static str> {
        self.check_frame(py, &[event_id, mode, nonce, toks, body, meta], now)
    }

    /// The verdicts of a run of `(event_id, mode, nonce, toks, body, meta)` frames in one
    /// call (see py.rs `run_frames`). The signature is the default guard's, so one driver
    /// serves both (`native_guard.token_run`); psguard keeps no per-broker state and strikes
    /// no source, so `broker_id` and `stop_on_strike` change nothing here.
    #[pyo3(signature = (frames, now, broker_id = None, *, stop_on_strike = false))]
    fn check_run(
        &mut self,
        py: Python<'_>,
        frames: &Bound<'_, PyAny>,
        now: f64,
        broker_id: Option<&Bound<'_, PyAny>>,
        stop_on_strike: bool,
    ) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
        let _ = broker_id;
        run_frames(py, frames, 6, stop_on_strike, |t| {
            self.check_frame(py, t, now)
        })
    }

    /// `check_run` on the core's run of `Publish` messages and their decoded `TokenEvent`s
    /// (the default guard's `check_msgs`, so one driver serves both).
    #[pyo3(signature = (messages, events, now, broker_id = None, *, stop_on_strike = false))]
    fn check_msgs(
        &mut self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        events: &Bound<'_, PyAny>,
        now: f64,
        broker_id: Option<&Bound<'_, PyAny>>,
        stop_on_strike: bool,
    ) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
        let _ = broker_id;
        let frames = token_items(py, messages, events)?;
        run_items(py, frames.into_iter().map(Ok), stop_on_strike, |t| {
            self.check_frame(py, t, now)
        })
    }
}

impl PyPsGuard {
    /// `check_publish` on a frame's items.
    fn check_frame(
        &mut self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        now: f64,
    ) -> PyResult<&'static str> {
        let missing = self.missing.bind(py);
        let keys = record_keys!(py, "mi", "mn", "mp");
        let Some(vals) = meta_items(py, &items[5], &keys, missing) else {
            return Ok("fallback");
        };
        let Some(f) = token_frame::<3>(items, &vals, missing) else {
            return Ok("fallback");
        };
        let m = PsMeta {
            rec: f.rec,
            mi: f.more[0],
            mn: f.more[1],
            mp: f.more[2],
        };
        let mut env = PyPsEnv {
            py,
            publishers: self.publishers.bind(py),
            revoked: self.revoked.bind(py),
            key: None,
        };
        let mut roots = self.roots.bind(py).borrow_mut();
        let verdict = check(
            &mut roots.inner,
            &mut env,
            f.event_id,
            f.mode,
            f.nonce,
            f.toks,
            f.body,
            &m,
            now,
            self.max_delay_ms,
        )?;
        Ok(verdict.as_str())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPsGuard>()
}

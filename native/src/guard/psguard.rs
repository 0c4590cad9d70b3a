//! PSGuard's publication guard (psguard/broker.py `PSGuardBroker.broker_check`, profile
//! `psguard`): the publisher's signature on the record (psguard.txt §3.3 records, signed with
//! Ed25519 here) or on its Merkle batch's root, through the scheme's `SignedRootVerifier`
//! (eventguard.txt §4.4 amortised), then the timestamp window. The pure check first, its PyO3
//! glue after; the Python method stays the spec (tests/schemes/psguard/test_psguard_native.py
//! compares the two on generated and mutated frames).

use super::core::{
    canonical_secrets, psguard_signed, Reason, RootVerifier, Val, Verdict, VerifyError, DIGEST,
    MAX_BATCH, MAX_PATH,
};
use super::py::{classify, exact_bytes, exact_str, is_invalid_token, run_frames, PyRootVerifier};
use pyo3::exceptions::PyKeyError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use sha2::{Digest, Sha256};

/// A psguard publication's `meta`, field by field (`Missing` where absent).
#[derive(Clone, Copy, Debug)]
pub struct PsMeta<'a> {
    pub p: Val<'a>,
    pub ts: Val<'a>,
    pub e: Val<'a>,
    pub h: Val<'a>,
    pub s: Val<'a>,
    pub sig: Val<'a>,
    pub mi: Val<'a>,
    pub mn: Val<'a>,
    pub mp: Val<'a>,
}

/// What the guard asks of its owner: the named publisher's key (false: none known), whether
/// the name is revoked, one signature on a record (`is_valid`), a root's signature (`verify`:
/// the owner's error, `forged` tells an `InvalidToken`).
pub trait PsEnv {
    type Err;
    fn key(&mut self, publisher: &str) -> Result<Option<Vec<u8>>, Self::Err>;
    fn revoked(&mut self, publisher: &str) -> Result<bool, Self::Err>;
    fn valid(&mut self, sig: &[u8], message: &[u8]) -> Result<bool, Self::Err>;
    fn verify(&mut self, sig: &[u8], message: &[u8]) -> Result<(), Self::Err>;
    fn forged(&self, e: &Self::Err) -> bool;
}

/// psguard/broker.py `broker_check` on a publication whose routing part decoded to
/// `(mode, nonce)` with tags `toks`.
#[allow(clippy::too_many_arguments)]
pub fn check<E: PsEnv>(
    roots: &mut RootVerifier,
    env: &mut E,
    event_id: &str,
    mode: &str,
    nonce: &[u8],
    toks: Val<'_>,
    body: &[u8],
    m: &PsMeta<'_>,
    now: f64,
    max_delay_ms: i64,
) -> Result<Verdict, E::Err> {
    let all = [toks, m.p, m.ts, m.e, m.h, m.s, m.sig, m.mi, m.mn, m.mp];
    if all.iter().any(|v| matches!(v, Val::Fallback)) {
        return Ok(Verdict::Fallback);
    }
    let bad = Ok(Verdict::Drop(Reason::Malformed));
    // psguard/wire.py `signed_from_wire` (as core.rs `DfGuard::check`)
    let (
        Val::Str(publisher),
        Val::Int(ts),
        Val::Int(epoch),
        Val::Bytes(hint),
        Val::Bytes(sec),
        Val::Bytes(sig),
        Val::Bytes(toks),
    ) = (m.p, m.ts, m.e, m.h, m.s, m.sig, toks)
    else {
        return bad;
    };
    if publisher.is_empty() || epoch < 0 {
        return bad;
    }
    let sec: std::borrow::Cow<'_, [u8]> = if sec.is_empty() {
        std::borrow::Cow::Borrowed(sec)
    } else {
        match canonical_secrets(sec) {
            Some(c) => std::borrow::Cow::Owned(c),
            None => return bad,
        }
    };
    let signed = psguard_signed(
        event_id, publisher, ts, epoch, mode, nonce, toks, hint, &sec, body,
    );
    let key = env.key(publisher)?;
    if env.revoked(publisher)? {
        return Ok(Verdict::Drop(Reason::Revoked));
    }
    if matches!(m.mn, Val::Missing) {
        // one signature per record (check_record: forged, then stale)
        let Some(_) = key else {
            return Ok(Verdict::Drop(Reason::Forged));
        };
        if !env.valid(sig, &signed)? {
            return Ok(Verdict::Drop(Reason::Forged));
        }
    } else {
        // psguard/broker.py `_batch_packed`
        let (Val::Int(index), Val::Int(size), Val::Bytes(path)) = (m.mi, m.mn, m.mp) else {
            return bad;
        };
        if !(0 <= index && index < size && size <= MAX_BATCH) {
            return bad;
        }
        if !path.len().is_multiple_of(DIGEST) || path.len() > MAX_PATH * DIGEST {
            return bad;
        }
        let Some(pk) = key else {
            return Ok(Verdict::Drop(Reason::Forged));
        };
        let leaf: [u8; 32] = Sha256::digest(&signed).into();
        match roots.verify(&pk, &leaf, sig, now, index, size, path, |msg| {
            env.verify(sig, msg)
        }) {
            Ok(_) => {}
            Err(VerifyError::Forged) => return Ok(Verdict::Drop(Reason::Forged)),
            Err(VerifyError::Sig(e)) if env.forged(&e) => return Ok(Verdict::Drop(Reason::Forged)),
            Err(VerifyError::Sig(e)) => return Err(e),
        }
    }
    // int(now * 1000) truncates toward zero, as `as` does (saturating beyond i64)
    let late = (i128::from((now * 1000.0) as i64) - i128::from(ts)).abs();
    if late > i128::from(max_delay_ms) {
        return Ok(Verdict::Drop(Reason::Stale));
    }
    Ok(Verdict::Pass)
}

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
        let missing = py.import("builtins")?.getattr("object")?.call0()?.unbind();
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
        event_id: &Bound<'_, PyAny>,
        mode: &Bound<'_, PyAny>,
        nonce: &Bound<'_, PyAny>,
        toks: &Bound<'_, PyAny>,
        body: &Bound<'_, PyAny>,
        meta: &Bound<'_, PyAny>,
        now: f64,
    ) -> PyResult<&'static str> {
        let (Some(event_id), Some(mode), Some(nonce), Some(body)) = (
            exact_str(event_id),
            exact_str(mode),
            exact_bytes(nonce),
            exact_bytes(body),
        ) else {
            return Ok("fallback");
        };
        let missing = self.missing.bind(py);
        let keys = [
            intern!(py, "p"),
            intern!(py, "ts"),
            intern!(py, "e"),
            intern!(py, "h"),
            intern!(py, "s"),
            intern!(py, "sig"),
            intern!(py, "mi"),
            intern!(py, "mn"),
            intern!(py, "mp"),
        ];
        let mut vals = Vec::with_capacity(keys.len());
        for k in keys {
            match meta.get_item(k) {
                Ok(v) => vals.push(v),
                Err(e) if e.is_instance_of::<PyKeyError>(py) => vals.push(missing.clone()),
                Err(_) => return Ok("fallback"),
            }
        }
        let v: Vec<Val<'_>> = vals.iter().map(|x| classify(x, missing)).collect();
        let m = PsMeta {
            p: v[0],
            ts: v[1],
            e: v[2],
            h: v[3],
            s: v[4],
            sig: v[5],
            mi: v[6],
            mn: v[7],
            mp: v[8],
        };
        let toks = classify(toks, missing);
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
            event_id,
            mode,
            nonce,
            toks,
            body,
            &m,
            now,
            self.max_delay_ms,
        )?;
        Ok(match verdict {
            Verdict::Pass => "",
            Verdict::Drop(r) => r.as_str(),
            Verdict::Fallback => "fallback",
        })
    }

    /// The verdicts of a run of `(event_id, mode, nonce, toks, body, meta)` frames in one
    /// call (see py.rs `run_frames`; psguard strikes no source).
    fn check_run(
        &mut self,
        py: Python<'_>,
        frames: &Bound<'_, PyAny>,
        now: f64,
    ) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
        run_frames(py, frames, false, |t: &Bound<'_, PyTuple>| {
            if t.len() != 6 {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "a frame is a 6-tuple",
                ));
            }
            self.check_publish(
                py,
                &t.get_item(0)?,
                &t.get_item(1)?,
                &t.get_item(2)?,
                &t.get_item(3)?,
                &t.get_item(4)?,
                &t.get_item(5)?,
                now,
            )
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPsGuard>()
}

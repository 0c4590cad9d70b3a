//! PyO3 glue of narada's publication guard (`narada.rs`): the scheme's token check, entity
//! keys and replay state as an `NdEnv`, frames in, verdicts out.
//!
//! Ed25519 batch verification (`crate::ed25519::batch`, RFC 8032 §5.1.7) over a run: before
//! a run is checked frame by frame, the signatures of its frames whose token this guard has
//! seen verified are tried together, on the digest the check would build and the entity key
//! that token named. A signature the batch verified is not checked again when the check
//! reaches it with that same key and digest; anything else (a failed batch, another key, a
//! frame the pre-pass could not read) is checked alone with pyca, as without the batch. The
//! pre-pass reads frames only (no callback, no state), so verdicts and state are those of
//! one check per frame; each signature enters at most one batch attempt (a forged frame
//! fails its batch, and its run falls back to single checks, at the cost of that attempt).
//! The one way a batch judges differently from OpenSSL (a signature whose `R` carries a
//! small-order component, which only the key's holder can make) is in `ed25519.rs`'s notes.

use super::batch::SigBatches;
use super::core::{Reason, SigItem, Val, HOT_CAPACITY};
use super::narada::{check, is_service_topic, signed_digest, NdEnv, NdMeta, NdToken};
use super::py::{classify, exact_bytes, exact_str, meta_items, missing_marker, run_frames};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use std::collections::HashMap;

/// The scheme's callbacks, seen by the core as an `NdEnv`; `key` is the entity key of the
/// token last verified (the one whose signature is checked next).
struct PyNdEnv<'a, 'py> {
    py: Python<'py>,
    now: f64,
    broker_id: &'a Bound<'py, PyAny>,
    verified: &'a Bound<'py, PyAny>,
    replay: &'a Bound<'py, PyAny>,
    key: Option<(Bound<'py, PyAny>, Vec<u8>)>,
    /// token bytes -> the entity key it named when verified (the batch pre-pass's guess)
    learned: &'a mut HashMap<Vec<u8>, Vec<u8>>,
    sigs: &'a SigBatches,
}

impl NdEnv for PyNdEnv<'_, '_> {
    type Err = PyErr;

    fn verified(&mut self, tok: &[u8], cert: &[u8]) -> PyResult<Result<NdToken, Reason>> {
        let r = self.verified.call1((
            PyBytes::new(self.py, tok),
            PyBytes::new(self.py, cert),
            self.now,
        ))?;
        if let Ok(reason) = r.downcast::<PyString>() {
            let reason = reason.to_str()?;
            return match Reason::parse(reason) {
                Some(r) => Ok(Err(r)),
                None => Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "not a guard verdict: {reason:.40}"
                ))),
            };
        }
        let t = r.downcast::<PyTuple>()?;
        let raw: Vec<u8> = t.get_item(4)?.extract()?;
        if !self.learned.contains_key(tok) {
            if self.learned.len() >= HOT_CAPACITY {
                self.learned.clear();
            }
            self.learned.insert(tok.to_vec(), raw.clone());
        }
        self.key = Some((t.get_item(3)?, raw));
        Ok(Ok(NdToken {
            topic: t.get_item(0)?.extract()?,
            publish: t.get_item(1)?.extract()?,
            fingerprint: t.get_item(2)?.extract()?,
        }))
    }

    fn valid(&mut self, sig: &[u8], message: &[u8]) -> PyResult<bool> {
        let (k, raw) = self.key.as_ref().expect("a verified token");
        if self.sigs.verified(raw, sig, message) {
            return Ok(true); // verified in its run's batch
        }
        if self.sigs.enabled && crate::ed25519::single(raw, sig, message) {
            return Ok(true); // a run's lone signature, natively (ed25519.rs)
        }
        k.call_method1(
            intern!(self.py, "is_valid"),
            (PyBytes::new(self.py, sig), PyBytes::new(self.py, message)),
        )?
        .is_truthy()
    }

    fn replayed(&mut self, fingerprint: &[u8], ts: i64, seq: i64) -> PyResult<bool> {
        let r = self
            .replay
            .call1((self.broker_id, PyBytes::new(self.py, fingerprint), ts, seq))?;
        Ok(!r.is_none())
    }
}

/// Narada's publication guard (narada/broker.py `_check` on a publication): one broker
/// scheme's, calling back into it for the token (its verified-token cache, CRL and
/// duration checks) and the replay state.
#[pyclass(module = "pubguard._native", name = "NaradaPublicationGuard")]
pub struct PyNdGuard {
    max_delay: f64,
    verified: PyObject,
    replay: PyObject,
    missing: PyObject,
    learned: HashMap<Vec<u8>, Vec<u8>>,
    /// the batch state (`guard/batch.rs`): on or off, signatures tried and verified
    sigs: SigBatches,
}

#[pymethods]
impl PyNdGuard {
    /// `verified(tok, cert, now)`: the verified token's `(topic, allows publish, certificate
    /// fingerprint, entity VerifyKey, its raw bytes)`, or the drop reason's value it is
    /// refused with; `replay(broker_id, fingerprint, ts, seq)`: the replay state's
    /// `check_and_accept`; `batch_verify`: try a run's signatures as one Ed25519 batch.
    #[new]
    #[pyo3(signature = (*, max_delay, verified, replay, batch_verify = true))]
    fn new(
        py: Python<'_>,
        max_delay: f64,
        verified: PyObject,
        replay: PyObject,
        batch_verify: bool,
    ) -> PyResult<Self> {
        let missing = missing_marker(py)?;
        Ok(PyNdGuard {
            max_delay,
            verified,
            replay,
            missing,
            learned: HashMap::new(),
            sigs: SigBatches::new(batch_verify),
        })
    }

    /// Signatures verified in batches (the rest are checked alone).
    #[getter]
    fn batch_verified(&self) -> u64 {
        self.sigs.verified
    }

    /// The verdict on one publication whose routing part decoded to `topic`: "" to pass, a
    /// drop reason's value, or "fallback" (the Python guard decides; nothing was changed).
    #[allow(clippy::too_many_arguments)]
    fn check_publish(
        &mut self,
        py: Python<'_>,
        event_id: Bound<'_, PyAny>,
        topic: Bound<'_, PyAny>,
        body: Bound<'_, PyAny>,
        meta: Bound<'_, PyAny>,
        now: f64,
        broker_id: &Bound<'_, PyAny>,
    ) -> PyResult<&'static str> {
        self.check_frame(py, &[event_id, topic, body, meta], now, broker_id)
    }

    /// The verdicts of a run of `(event_id, topic, body, meta)` frames from one link in one
    /// call, stopping as py.rs `run_frames` says.
    #[pyo3(signature = (frames, now, broker_id, *, stop_on_strike))]
    fn check_run(
        &mut self,
        py: Python<'_>,
        frames: &Bound<'_, PyAny>,
        now: f64,
        broker_id: &Bound<'_, PyAny>,
        stop_on_strike: bool,
    ) -> PyResult<(Vec<&'static str>, Option<PyObject>)> {
        if self.sigs.enabled {
            self.batch(py, frames)?;
        }
        run_frames(py, frames, 4, stop_on_strike, |t| {
            self.check_frame(py, t, now, broker_id)
        })
    }
}

impl PyNdGuard {
    /// The batch pre-pass (see the module notes): the signatures of `frames` that a check
    /// would verify with a key this guard has seen, not tried before, as one batch.
    fn batch(&mut self, py: Python<'_>, frames: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.learned.is_empty() {
            return Ok(());
        }
        let missing = self.missing.bind(py);
        let keys = [
            intern!(py, "tok"),
            intern!(py, "kv"),
            intern!(py, "ts"),
            intern!(py, "seq"),
            intern!(py, "sig"),
        ];
        let mut batch = Vec::new();
        for f in frames.try_iter()? {
            let f = f?;
            let Ok(t) = f.downcast::<PyTuple>() else {
                break;
            };
            if t.len() != 4 {
                break;
            }
            let items: Vec<Bound<'_, PyAny>> = t.iter().collect();
            let (Some(eid), Val::Str(topic), Some(body)) = (
                exact_str(&items[0]),
                classify(&items[1], missing),
                exact_bytes(&items[2]),
            ) else {
                continue;
            };
            let Some(vals) = meta_items(py, &items[3], &keys, missing) else {
                continue;
            };
            let v = vals.each_ref().map(|x| classify(x, missing));
            let (Val::Bytes(tok), Val::Int(kv), Val::Int(ts), Val::Int(seq), Val::Bytes(sig)) =
                (v[0], v[1], v[2], v[3], v[4])
            else {
                continue;
            };
            if kv < 0 || ts < 0 || seq < 0 || is_service_topic(topic) || !self.sigs.untried(sig) {
                continue;
            }
            let Some(pk) = self.learned.get(tok) else {
                continue;
            };
            batch.push(SigItem {
                pk: pk.clone(),
                sig: sig.to_vec(),
                msg: signed_digest("publish", eid, topic, ts, seq, 0, kv, body, tok),
            });
        }
        let sigs = &mut self.sigs;
        py.allow_threads(|| sigs.run(batch));
        Ok(())
    }

    /// `check_publish` on a frame's items.
    fn check_frame(
        &mut self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        now: f64,
        broker_id: &Bound<'_, PyAny>,
    ) -> PyResult<&'static str> {
        let (Some(event_id), Some(body)) = (exact_str(&items[0]), exact_bytes(&items[2])) else {
            return Ok("fallback");
        };
        let missing = self.missing.bind(py);
        let keys = [
            intern!(py, "tok"),
            intern!(py, "cert"),
            intern!(py, "kv"),
            intern!(py, "ts"),
            intern!(py, "seq"),
            intern!(py, "sig"),
        ];
        let Some(vals) = meta_items(py, &items[3], &keys, missing) else {
            return Ok("fallback");
        };
        let v = vals.each_ref().map(|x| classify(x, missing));
        let m = NdMeta {
            tok: v[0],
            cert: v[1],
            kv: v[2],
            ts: v[3],
            seq: v[4],
            sig: v[5],
        };
        let mut env = PyNdEnv {
            py,
            now,
            broker_id,
            verified: self.verified.bind(py),
            replay: self.replay.bind(py),
            key: None,
            learned: &mut self.learned,
            sigs: &self.sigs,
        };
        let topic = classify(&items[1], missing);
        let verdict = check(&mut env, event_id, topic, body, &m, now, self.max_delay)?;
        Ok(verdict.as_str())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyNdGuard>()
}

//! Hermes attribute encryption for a whole micro-batch (hermes-encrypted-access-control.txt
//! §3.2, §3.5): the twin of `pubguard.schemes.hermes.content._seal_attribute_run` /
//! `_open_attribute_run`, which stay the reference (tests/schemes/hermes/test_hermes_native.py
//! compares the two on the same keys and counters).
//!
//! The publisher hosting broker seals every attribute of every event of a micro-batch: the
//! plaintext is msgpack `[app_id, value]`, the associated data `"hermes-a\0" || type id ||
//! attribute id || ts` (big-endian i64), the nonce `0x00000000 || n + i` for attribute `i`
//! under the attribute's per-PHB key (`counter_aead.broker_subkey`). The result is the
//! event's one opaque routing field, `ts (8) || n (8) || len(PHB) (2) || PHB || tuples`, a
//! tuple being `attr_id || len (4) || ciphertext || tag`. The subscriber hosting broker
//! parses the tuples, opens the attributes it holds keys for and unpacks each value.
//!
//! One call per micro-batch: the per-attribute work (packing, associated data, the cipher
//! call, splitting, unpacking) never goes through Python. Values are the model's (str, int,
//! float, bool); the msgpack subset here is exactly what `msgpack.Packer(use_bin_type=True)`
//! writes for them. Anything outside it (another value type, a counter out of range, a
//! plaintext this decoder does not take) raises `ValueError`/`TypeError`/`KeyError` and the
//! Python wrapper runs the reference, which decides and words the error.

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Nonce, Tag};
use hmac::{Hmac, Mac};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use sha2::Sha256;

use crate::aead::{nonce, GcmKey};

const AAD_ATTR: &[u8] = b"hermes-a\x00";
const TAG_BYTES: usize = 16;
/// content.py MAX_ATTRS: attribute tuples one event may carry
const MAX_ATTRS: usize = 1024;
/// content.py WIRE_ID_BYTES: the digest bytes a wire id keeps (32 hex characters)
const WIRE_ID_BYTES: usize = 16;

fn refuse(why: &'static str) -> PyErr {
    PyValueError::new_err(why)
}

fn pack_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let n = b.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n < 256 {
        out.push(0xd9);
        out.push(n as u8);
    } else if n < 65_536 {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(b);
}

/// msgpack's smallest form of a signed integer (msgpack-c `pack_real_int64`).
fn pack_i64(out: &mut Vec<u8>, d: i64) {
    if d < -(1 << 5) {
        if d < -(1 << 15) {
            if d < -(1 << 31) {
                out.push(0xd3);
                out.extend_from_slice(&d.to_be_bytes());
            } else {
                out.push(0xd2);
                out.extend_from_slice(&(d as i32).to_be_bytes());
            }
        } else if d < -(1 << 7) {
            out.push(0xd1);
            out.extend_from_slice(&(d as i16).to_be_bytes());
        } else {
            out.push(0xd0);
            out.push(d as i8 as u8);
        }
    } else if d < (1 << 7) {
        out.push(d as i8 as u8); // positive or negative fixint
    } else {
        pack_u64(out, d as u64);
    }
}

fn pack_u64(out: &mut Vec<u8>, d: u64) {
    if d < (1 << 7) {
        out.push(d as u8);
    } else if d < (1 << 8) {
        out.push(0xcc);
        out.push(d as u8);
    } else if d < (1 << 16) {
        out.push(0xcd);
        out.extend_from_slice(&(d as u16).to_be_bytes());
    } else if d < (1 << 32) {
        out.push(0xce);
        out.extend_from_slice(&(d as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&d.to_be_bytes());
    }
}

/// One attribute value, exact types only (the PHB type-checked it: `TypeView.type_check`).
fn pack_value(out: &mut Vec<u8>, v: &Bound<'_, PyAny>) -> PyResult<()> {
    if v.is_exact_instance_of::<PyString>() {
        pack_str(out, v.downcast::<PyString>()?.to_str()?);
    } else if v.is_exact_instance_of::<PyBool>() {
        out.push(if v.is_truthy()? { 0xc3 } else { 0xc2 });
    } else if v.is_exact_instance_of::<PyInt>() {
        if let Ok(d) = v.extract::<i64>() {
            pack_i64(out, d);
        } else {
            pack_u64(out, v.extract::<u64>()?);
        }
    } else if let Ok(f) = v.downcast_exact::<PyFloat>() {
        out.push(0xcb);
        out.extend_from_slice(&f.value().to_be_bytes());
    } else {
        return Err(refuse("a value type the native packer does not take"));
    }
    Ok(())
}

fn exact_i64(ob: &Bound<'_, PyAny>) -> PyResult<i64> {
    if !ob.is_exact_instance_of::<PyInt>() {
        return Err(refuse("not an int"));
    }
    ob.extract::<i64>()
}

fn exact_u64(ob: &Bound<'_, PyAny>) -> PyResult<u64> {
    if !ob.is_exact_instance_of::<PyInt>() {
        return Err(refuse("not an int"));
    }
    ob.extract::<u64>()
}

/// `(attr_id, cipher)` or `(name, cipher)`: the first item and the cipher's native key.
fn key_entry<'py>(hit: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, GcmKey>)> {
    let t = hit.downcast::<PyTuple>()?;
    if t.len() != 2 {
        return Err(refuse("a key entry is a pair"));
    }
    let gcm = t.get_item(1)?.getattr(intern!(hit.py(), "gcm"))?;
    Ok((t.get_item(0)?, gcm.downcast::<GcmKey>()?.clone()))
}

/// Scratch buffers reused across the jobs of one run.
#[derive(Default)]
struct Scratch {
    aad: Vec<u8>,
    pt: Vec<u8>,
    head: Vec<u8>,
}

/// One seal job `(type_id, ts_ms, n, phb, app_id, attrs, keys)` sealed to its routing field.
fn seal_job(t: &Bound<'_, PyTuple>, s: &mut Scratch) -> PyResult<Vec<u8>> {
    if t.len() != 7 {
        return Err(refuse("a seal job has seven fields"));
    }
    let tid_ob = t.get_item(0)?;
    let tid = tid_ob.downcast::<PyBytes>()?.as_bytes();
    let ts = exact_i64(&t.get_item(1)?)?;
    let n = exact_u64(&t.get_item(2)?)?;
    let phb_ob = t.get_item(3)?;
    let phb = phb_ob.downcast::<PyBytes>()?.as_bytes();
    let app_ob = t.get_item(4)?;
    let app_id = app_ob.downcast_exact::<PyString>()?.to_str()?;
    let attrs_ob = t.get_item(5)?;
    let attrs = attrs_ob.downcast::<PyDict>()?;
    let keys_ob = t.get_item(6)?;
    let keys = keys_ob.downcast::<PyDict>()?;
    seal_one(tid, ts, n, phb, app_id, attrs, keys, s)
}

/// One event's attributes `attrs` sealed under `keys` (name -> `(attr_id, cipher)`) from
/// counter `n`, to its routing field.
fn seal_one(
    tid: &[u8],
    ts: i64,
    n: u64,
    phb: &[u8],
    app_id: &str,
    attrs: &Bound<'_, PyDict>,
    keys: &Bound<'_, PyDict>,
    s: &mut Scratch,
) -> PyResult<Vec<u8>> {
    if phb.len() > u16::MAX as usize {
        return Err(refuse("PHB id too long"));
    }
    if !attrs.is_empty() && n.checked_add(attrs.len() as u64 - 1).is_none() {
        return Err(refuse("nonce counter out of range"));
    }
    let mut blob = Vec::with_capacity(18 + phb.len() + attrs.len() * 128);
    blob.extend_from_slice(&ts.to_be_bytes());
    blob.extend_from_slice(&n.to_be_bytes());
    blob.extend_from_slice(&(phb.len() as u16).to_be_bytes());
    blob.extend_from_slice(phb);
    s.head.clear();
    s.head.push(0x92); // [app_id, value]
    pack_str(&mut s.head, app_id);
    let tail = ts.to_be_bytes();
    for (i, (name, v)) in attrs.iter().enumerate() {
        let Some(hit) = keys.get_item(&name)? else {
            return Err(PyKeyError::new_err("no key for an attribute"));
        };
        let (aid_ob, key) = key_entry(&hit)?;
        let aid = aid_ob.downcast::<PyBytes>()?.as_bytes();
        s.pt.clear();
        s.pt.extend_from_slice(&s.head);
        pack_value(&mut s.pt, &v)?;
        s.aad.clear();
        s.aad.extend_from_slice(AAD_ATTR);
        s.aad.extend_from_slice(tid);
        s.aad.extend_from_slice(aid);
        s.aad.extend_from_slice(&tail);
        let tag = key
            .get()
            .cipher
            .encrypt_in_place_detached(Nonce::from_slice(&nonce(n + i as u64)), &s.aad, &mut s.pt)
            .map_err(|_| refuse("AES-GCM refused the input"))?;
        let len = u32::try_from(s.pt.len() + TAG_BYTES).map_err(|_| refuse("value too long"))?;
        blob.extend_from_slice(aid);
        blob.extend_from_slice(&len.to_be_bytes());
        blob.extend_from_slice(&s.pt);
        blob.extend_from_slice(&tag);
    }
    Ok(blob)
}

/// `_seal_attribute_run(jobs)`: each job `(type_id, ts_ms, n, phb, app_id, attrs, keys)`
/// sealed to its routing field.
#[pyfunction]
fn hermes_seal_run<'py>(
    py: Python<'py>,
    jobs: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut s = Scratch::default();
    for job in jobs.iter() {
        let blob = seal_job(job.downcast::<PyTuple>()?, &mut s)?;
        out.append(PyBytes::new(py, &blob))?;
    }
    Ok(out)
}

/// The wire-id key of a PHB (`content.Crypter.wire_id`): `KH(k, .)`, HMAC-SHA256 under
/// `k = HKDF(S, "pubguard-hermes-wire-id" || mode || PHB)`, keyed once. Not picklable; the
/// repr shows nothing of the key.
#[pyclass(module = "pubguard._native", frozen)]
pub struct HermesWireIdKey {
    mac: Hmac<Sha256>,
}

#[pymethods]
impl HermesWireIdKey {
    /// `HermesWireIdKey(key)`: the derived key `k` (32 bytes).
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        if key.len() != 32 {
            return Err(refuse("HermesWireIdKey needs a 32-byte key"));
        }
        let mac = Hmac::<Sha256>::new_from_slice(key).map_err(|_| refuse("HMAC key rejected"))?;
        Ok(Self { mac })
    }

    fn __repr__(&self) -> &'static str {
        "HermesWireIdKey(<secret>)"
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `hex(KH(k, type_id || app_id)[:16])`.
fn wire_id(key: &HermesWireIdKey, tid: &[u8], app_id: &str) -> String {
    let mut mac = key.mac.clone();
    mac.update(tid);
    mac.update(app_id.as_bytes());
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(2 * WIRE_ID_BYTES);
    for b in &digest[..WIRE_ID_BYTES] {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

/// The PHB's step for a micro-batch (`content.Crypter.seal_publications`): each job of
/// `hermes_seal_run` sealed, and the event's wire id beside it, `(sealed, wire_id)`, in one
/// call (hermes §3.2, §3.5).
#[pyfunction]
fn hermes_seal_publish_run<'py>(
    py: Python<'py>,
    jobs: &Bound<'py, PyList>,
    key: &Bound<'py, HermesWireIdKey>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut s = Scratch::default();
    let key = key.get();
    for job in jobs.iter() {
        let t = job.downcast::<PyTuple>()?;
        let blob = seal_job(t, &mut s)?;
        let tid_ob = t.get_item(0)?;
        let app_ob = t.get_item(4)?;
        let wid = wire_id(
            key,
            tid_ob.downcast::<PyBytes>()?.as_bytes(),
            app_ob.downcast_exact::<PyString>()?.to_str()?,
        );
        let pair = PyTuple::new(
            py,
            [
                PyBytes::new(py, &blob).into_any(),
                PyString::new(py, &wid).into_any(),
            ],
        )?;
        out.append(pair)?;
    }
    Ok(out)
}

/// `Crypter.wire_id` of each `(type_id, app_id)` (event mode's run), in one call.
#[pyfunction]
fn hermes_wire_ids<'py>(
    py: Python<'py>,
    key: &Bound<'py, HermesWireIdKey>,
    items: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let key = key.get();
    for item in items.iter() {
        let t = item.downcast::<PyTuple>()?;
        if t.len() != 2 {
            return Err(refuse("a wire-id item is a pair"));
        }
        let tid_ob = t.get_item(0)?;
        let app_ob = t.get_item(1)?;
        let wid = wire_id(
            key,
            tid_ob.downcast::<PyBytes>()?.as_bytes(),
            app_ob.downcast_exact::<PyString>()?.to_str()?,
        );
        out.append(PyString::new(py, &wid))?;
    }
    Ok(out)
}

/// The PHB's step for a run of one type at one instant
/// (`content.Crypter.seal_publish_run`): the events `items`, each `(attrs, app_id)`,
/// sealed in order from counter `n` (event `k` starts where event `k - 1`'s attributes end;
/// one value for an event without attributes, as `NonceCounter.take(max(1, len))`), each
/// to its sealed routing `{"t": type_id, "s": sealed}` with its wire id beside it, and the
/// counter values used. Every attribute of every event must have a key in `keys` (else
/// `KeyError`, and nothing is returned: the caller takes no counter values then).
#[pyfunction]
fn hermes_seal_routing_run<'py>(
    py: Python<'py>,
    tid: &Bound<'py, PyBytes>,
    ts: i64,
    n: u64,
    phb: &[u8],
    keys: &Bound<'py, PyDict>,
    items: &Bound<'py, PyList>,
    key: &Bound<'py, HermesWireIdKey>,
) -> PyResult<(Bound<'py, PyList>, u64)> {
    let out = PyList::empty(py);
    let mut s = Scratch::default();
    let wkey = key.get();
    let tid_b = tid.as_bytes();
    let t_key = intern!(py, "t");
    let s_key = intern!(py, "s");
    let mut next = n;
    for item in items.iter() {
        let t = item.downcast::<PyTuple>()?;
        if t.len() != 2 {
            return Err(refuse("a run item is a pair"));
        }
        let attrs_ob = t.get_item(0)?;
        let attrs = attrs_ob.downcast::<PyDict>()?;
        let app_ob = t.get_item(1)?;
        let app_id = app_ob.downcast_exact::<PyString>()?.to_str()?;
        let blob = seal_one(tid_b, ts, next, phb, app_id, attrs, keys, &mut s)?;
        next = next
            .checked_add(attrs.len().max(1) as u64)
            .ok_or_else(|| refuse("nonce counter out of range"))?;
        let routing = PyDict::new(py);
        routing.set_item(t_key, tid)?;
        routing.set_item(s_key, PyBytes::new(py, &blob))?;
        let wid = wire_id(wkey, tid_b, app_id);
        out.append(PyTuple::new(
            py,
            [routing.into_any(), PyString::new(py, &wid).into_any()],
        )?)?;
    }
    Ok((out, next - n))
}

/// A msgpack reader over one plaintext, for the subset `pack_value` writes (and nil).
struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

enum Val<'a> {
    Nil,
    Bool(bool),
    I(i64),
    U(u64),
    F(f64),
    S(&'a str),
}

impl<'a> Reader<'a> {
    fn take(&mut self, k: usize) -> Option<&'a [u8]> {
        let end = self.i.checked_add(k)?;
        let s = self.b.get(self.i..end)?;
        self.i = end;
        Some(s)
    }

    fn be<const K: usize>(&mut self) -> Option<[u8; K]> {
        self.take(K)?.try_into().ok()
    }

    fn str_of(&mut self, k: usize) -> Option<Val<'a>> {
        Some(Val::S(std::str::from_utf8(self.take(k)?).ok()?))
    }

    fn value(&mut self) -> Option<Val<'a>> {
        let tag = *self.take(1)?.first()?;
        Some(match tag {
            0x00..=0x7f => Val::I(tag as i64),
            0xe0..=0xff => Val::I(tag as i8 as i64),
            0xa0..=0xbf => return self.str_of((tag & 0x1f) as usize),
            0xd9 => {
                let k = self.be::<1>()?[0] as usize;
                return self.str_of(k);
            }
            0xda => {
                let k = u16::from_be_bytes(self.be()?) as usize;
                return self.str_of(k);
            }
            0xdb => {
                let k = u32::from_be_bytes(self.be()?) as usize;
                return self.str_of(k);
            }
            0xc0 => Val::Nil,
            0xc2 => Val::Bool(false),
            0xc3 => Val::Bool(true),
            0xcc => Val::U(self.be::<1>()?[0] as u64),
            0xcd => Val::U(u16::from_be_bytes(self.be()?) as u64),
            0xce => Val::U(u32::from_be_bytes(self.be()?) as u64),
            0xcf => Val::U(u64::from_be_bytes(self.be()?)),
            0xd0 => Val::I(self.be::<1>()?[0] as i8 as i64),
            0xd1 => Val::I(i16::from_be_bytes(self.be()?) as i64),
            0xd2 => Val::I(i32::from_be_bytes(self.be()?) as i64),
            0xd3 => Val::I(i64::from_be_bytes(self.be()?)),
            0xcb => Val::F(f64::from_be_bytes(self.be()?)),
            _ => return None,
        })
    }
}

fn to_py<'py>(py: Python<'py>, v: &Val<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match *v {
        Val::Nil => py.None().into_bound(py),
        Val::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Val::I(d) => d.into_pyobject(py)?.into_any(),
        Val::U(d) => d.into_pyobject(py)?.into_any(),
        Val::F(f) => PyFloat::new(py, f).into_any(),
        Val::S(s) => PyString::new(py, s).into_any(),
    })
}

/// The attribute tuples of a body, or None when malformed (`content.unpack_attrs`).
fn tuples(body: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < body.len() {
        if body.len() - i < 36 || out.len() >= MAX_ATTRS {
            return None;
        }
        let aid = &body[i..i + 32];
        let ln = u32::from_be_bytes(body[i + 32..i + 36].try_into().ok()?) as usize;
        let j = (i + 36).checked_add(ln)?;
        if j > body.len() {
            return None;
        }
        out.push((aid, &body[i + 36..j]));
        i = j;
    }
    Some(out)
}

/// Scratch buffers of a run's openings.
#[derive(Default)]
struct OpenScratch {
    aad: Vec<u8>,
    buf: Vec<u8>,
}

/// One event's attribute tuples `body` opened (`_open_attribute_run` of one job):
/// `(name -> value, app_id | None)`, or None for a malformed body.
fn open_body<'py>(
    py: Python<'py>,
    tid: &[u8],
    ts: i64,
    n: u64,
    body: &[u8],
    keys: &Bound<'py, PyDict>,
    s: &mut OpenScratch,
) -> PyResult<Bound<'py, PyAny>> {
    let Some(pairs) = tuples(body) else {
        return Ok(py.None().into_bound(py));
    };
    let values = PyDict::new(py);
    let mut app_id: Option<Bound<'py, PyAny>> = None;
    // open_each: a run whose counters would overflow opens to nothing
    let in_range = pairs.is_empty() || n.checked_add(pairs.len() as u64 - 1).is_some();
    let tail = ts.to_be_bytes();
    for (i, (aid, ct)) in pairs.iter().enumerate() {
        if !in_range || ct.len() < TAG_BYTES {
            continue;
        }
        let Some(hit) = keys.get_item(PyBytes::new(py, aid))? else {
            continue; // no key here, or a name this broker does not know
        };
        let (name, key) = key_entry(&hit)?;
        s.aad.clear();
        s.aad.extend_from_slice(AAD_ATTR);
        s.aad.extend_from_slice(tid);
        s.aad.extend_from_slice(aid);
        s.aad.extend_from_slice(&tail);
        let (c, tag) = ct.split_at(ct.len() - TAG_BYTES);
        s.buf.clear();
        s.buf.extend_from_slice(c);
        let ok = key.get().cipher.decrypt_in_place_detached(
            Nonce::from_slice(&nonce(n + i as u64)),
            &s.aad,
            &mut s.buf,
            Tag::from_slice(tag),
        );
        if ok.is_err() {
            continue; // fails to authenticate: left out
        }
        let mut r = Reader { b: &s.buf, i: 0 };
        if r.take(1) != Some(&[0x92][..]) {
            return Err(refuse("a plaintext the native reader does not take"));
        }
        let (Some(app), Some(v)) = (r.value(), r.value()) else {
            return Err(refuse("a plaintext the native reader does not take"));
        };
        if r.i != s.buf.len() || !matches!(app, Val::S(_) | Val::Nil) {
            return Err(refuse("a plaintext the native reader does not take"));
        }
        values.set_item(&name, to_py(py, &v)?)?;
        if let (None, Val::S(a)) = (&app_id, &app) {
            if !a.is_empty() {
                app_id = Some(PyString::new(py, a).into_any());
            }
        }
    }
    let app = app_id.unwrap_or_else(|| py.None().into_bound(py));
    Ok(PyTuple::new(py, [values.into_any(), app])?.into_any())
}

/// `_open_attribute_run(jobs)`: each job `(type_id, ts_ms, n, body, keys)` opened to
/// `(name -> value, app_id | None)`, or None for a malformed body.
#[pyfunction]
fn hermes_open_run<'py>(
    py: Python<'py>,
    jobs: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut s = OpenScratch::default();
    for job in jobs.iter() {
        let t = job.downcast::<PyTuple>()?;
        if t.len() != 5 {
            return Err(refuse("an open job has five fields"));
        }
        let tid_ob = t.get_item(0)?;
        let tid = tid_ob.downcast::<PyBytes>()?.as_bytes();
        let ts = exact_i64(&t.get_item(1)?)?;
        let n = exact_u64(&t.get_item(2)?)?;
        let body_ob = t.get_item(3)?;
        let body = body_ob.downcast::<PyBytes>()?.as_bytes();
        let keys_ob = t.get_item(4)?;
        let keys = keys_ob.downcast::<PyDict>()?;
        out.append(open_body(py, tid, ts, n, body, keys, &mut s)?)?;
    }
    Ok(out)
}

/// content.py MAX_PHB_BYTES: the longest PHB id a sealed header names
const MAX_PHB_BYTES: usize = 1024;
/// content.py `_HDR`: `ts (i64) || n (u64) || len(PHB) (u16)`
const HDR_BYTES: usize = 18;

/// `Sealed.parse`'s header: `(ts, n, PHB, body)`, or None when malformed.
fn header(blob: &[u8]) -> Option<(i64, u64, &str, &[u8])> {
    if blob.len() < HDR_BYTES {
        return None;
    }
    let ts = i64::from_be_bytes(blob[0..8].try_into().ok()?);
    let n = u64::from_be_bytes(blob[8..16].try_into().ok()?);
    let ln = u16::from_be_bytes(blob[16..18].try_into().ok()?) as usize;
    let end = HDR_BYTES + ln;
    if ln == 0 || ln > MAX_PHB_BYTES || blob.len() < end {
        return None;
    }
    let phb = std::str::from_utf8(&blob[HDR_BYTES..end]).ok()?;
    Some((ts, n, phb, &blob[end..]))
}

/// The SHB's step for a run (`content.Crypter.open_sealed_run`): each job `(view, type_id,
/// sealed)` parsed (`Sealed.parse`) and opened (`_open_attribute_run`) in one call, to
/// `(name -> value, app_id | None)`; None for a malformed header, `({}, None)` for a
/// malformed body. `keys(view, ts, phb)` gives attribute id -> `(name, cipher)` of the keys
/// in force (`Crypter._plan`); it is asked again only when the view, timestamp or PHB
/// changes from the previous job's.
#[pyfunction]
fn hermes_open_sealed_run<'py>(
    py: Python<'py>,
    jobs: &Bound<'py, PyList>,
    keys: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut s = OpenScratch::default();
    let mut last: Option<(Bound<'py, PyAny>, i64, String, Bound<'py, PyDict>)> = None;
    for job in jobs.iter() {
        let t = job.downcast::<PyTuple>()?;
        if t.len() != 3 {
            return Err(refuse("an open job has three fields"));
        }
        let view = t.get_item(0)?;
        let tid_ob = t.get_item(1)?;
        let tid = tid_ob.downcast::<PyBytes>()?.as_bytes();
        let blob_ob = t.get_item(2)?;
        let Ok(blob) = blob_ob.downcast_exact::<PyBytes>() else {
            out.append(py.None())?;
            continue;
        };
        let Some((ts, n, phb, body)) = header(blob.as_bytes()) else {
            out.append(py.None())?;
            continue;
        };
        let same =
            matches!(&last, Some((v, lts, lphb, _)) if v.is(&view) && *lts == ts && lphb == phb);
        if !same {
            let by_aid = keys.call1((&view, ts, phb))?;
            let by_aid = by_aid.downcast_into::<PyDict>()?;
            last = Some((view, ts, phb.to_owned(), by_aid));
        }
        let Some((_, _, _, by_aid)) = &last else {
            return Err(refuse("no keys"));
        };
        let opened = open_body(py, tid, ts, n, body, by_aid, &mut s)?;
        if opened.is_none() {
            let empty = PyTuple::new(py, [PyDict::new(py).into_any(), py.None().into_bound(py)])?;
            out.append(empty)?;
        } else {
            out.append(opened)?;
        }
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(hermes_seal_run, m)?)?;
    m.add_function(wrap_pyfunction!(hermes_open_run, m)?)?;
    m.add_function(wrap_pyfunction!(hermes_open_sealed_run, m)?)?;
    m.add_function(wrap_pyfunction!(hermes_seal_publish_run, m)?)?;
    m.add_function(wrap_pyfunction!(hermes_wire_ids, m)?)?;
    m.add_function(wrap_pyfunction!(hermes_seal_routing_run, m)?)?;
    m.add_class::<HermesWireIdKey>()?;
    Ok(())
}

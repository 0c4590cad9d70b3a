//! Key-tree derivation (psguard.txt §3.1-3.2) and EventGuard's keyed hash `KH` (eventguard.txt
//! §4.1), the native twins of `pubguard.keys.nakt`, `pubguard.keys.kdc` and
//! `pubguard.crypto.KeyedHash`.
//!
//! Every tree uses one step, `K_{xi||b} = H(K_xi || b)` with `H` = SHA-256 and `b` one label
//! (a NAKT bit `"0"`/`"1"`, one character of a prefix/suffix chain, one category name). Heap
//! indices name NAKT nodes (the root is 1, node `n` has children `2n` and `2n + 1`); they are
//! `u64` here, so the Python caller dispatches only trees of depth <= `MAX_NATIVE_DEPTH`
//! (deeper ones, up to the Python limit of 64, stay on the Python path).
//!
//! Nothing here panics on any input: bad input is a `ValueError` (the Python wrapper turns it
//! into the reference's typed error by re-running the reference).

use hmac::{Hmac, Mac};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple, PyType};
use sha2::{Digest, Sha256};

/// A 32-byte tree key (every derived key is one SHA-256 output).
pub type Key = [u8; 32];
/// One SHA-256 message block, in the type `compress256` reads (built in place: no copy).
type Block = sha2::digest::generic_array::GenericArray<u8, sha2::digest::consts::U64>;
type HmacSha256 = Hmac<Sha256>;

/// Deepest NAKT handled natively: heap indices below 2^63.
pub const MAX_NATIVE_DEPTH: u32 = 62;

/// SHA-256's initial hash value (FIPS 180-4 §5.3.3).
const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];
/// Longest label that fits one padded block after a 32-byte key (64 - 32 - 1 - 8).
const ONE_BLOCK_LABEL_MAX: usize = 23;

/// psguard.txt §3.1: `K_{xi||b} = H(K_xi || b)`.
#[inline]
pub fn step(k: &[u8], label: &[u8]) -> Key {
    if k.len() == 32 && label.len() <= ONE_BLOCK_LABEL_MAX {
        return step_one_block(k, label);
    }
    let mut h = Sha256::new();
    h.update(k);
    h.update(label);
    h.finalize().into()
}

/// `H(k || label)` for a 32-byte `k` and a short label: the message and its padding (FIPS
/// 180-4 §5.1.1) fill one block, compressed once without the streaming hasher's buffering.
#[inline]
fn step_one_block(k: &[u8], label: &[u8]) -> Key {
    let l = label.len();
    let mut block = Block::default();
    block[..32].copy_from_slice(k);
    block[32..32 + l].copy_from_slice(label);
    block[32 + l] = 0x80;
    block[56..].copy_from_slice(&(((32 + l) as u64) * 8).to_be_bytes());
    let mut st = H0;
    sha2::compress256(&mut st, std::slice::from_ref(&block));
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(4).zip(st) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// `K <- H(K || b)` for each byte `b` of `labels` (NAKT bits, one ASCII byte each), from a
/// 32-byte key: one block buffer holds the key, the label and the padding, and each step's
/// output is written straight back over the key part (no per-step buffer or copy). The chain
/// is bound by SHA-256 latency: on SHA-NI about 44 ns a compression, and this loop adds the
/// state's byte order round trip (`compress256` takes bytes).
pub fn chain_bytes(key: &Key, labels: &[u8]) -> Key {
    let mut block = Block::default();
    block[..32].copy_from_slice(key);
    block[33] = 0x80;
    block[56..].copy_from_slice(&(33u64 * 8).to_be_bytes());
    for &b in labels {
        block[32] = b;
        let mut st = H0;
        sha2::compress256(&mut st, std::slice::from_ref(&block));
        for (o, w) in block[..32].chunks_exact_mut(4).zip(st) {
            o.copy_from_slice(&w.to_be_bytes());
        }
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(&block[..32]);
    out
}

/// Python's `SecretBytes` class and the two C-level callables that make one without running
/// its Python `__init__`: `object.__new__(SecretBytes)`, then the `_b` slot's own setter (what
/// `SecretBytes.__init__` does on its fast path, `pubguard.crypto.secret._set_b`). Looked up
/// once per process, with `object.__new__`'s argument tuple `(SecretBytes,)` built once too.
struct SecretType {
    cls: Py<PyType>,
    new: Py<PyAny>,
    new_args: Py<PyTuple>,
    set: Py<PyAny>,
}

static SECRET: GILOnceCell<SecretType> = GILOnceCell::new();

fn secret_type(py: Python<'_>) -> PyResult<&SecretType> {
    SECRET.get_or_try_init(py, || {
        let cls = py
            .import("pubguard.crypto.secret")?
            .getattr("SecretBytes")?
            .downcast_into::<PyType>()?;
        let slot = cls.getattr("__dict__")?.get_item("_b")?;
        let new_args = PyTuple::new(py, [&cls])?.unbind();
        Ok(SecretType {
            new_args,
            new: py
                .import("builtins")?
                .getattr("object")?
                .getattr("__new__")?
                .unbind(),
            set: slot.getattr("__set__")?.unbind(),
            cls: cls.unbind(),
        })
    })
}

/// Whether `ob` is Python's `SecretBytes` class itself (the `wrap` the callers pass).
pub fn is_secret_class(ob: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(ob.is(secret_type(ob.py())?.cls.bind(ob.py())))
}

/// A new `SecretBytes` holding `k` (see `SecretType`).
pub fn secret_new<'py>(py: Python<'py>, k: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let t = secret_type(py)?;
    let ob = t.new.bind(py).call1(t.new_args.bind(py))?;
    t.set.bind(py).call1((&ob, PyBytes::new(py, k)))?;
    Ok(ob)
}

/// The key bytes of `ob` when it is exactly `bytes` or exactly `SecretBytes`, else None (the
/// caller then runs the Python reference, which decides).
pub fn key_bytes<'py>(ob: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if let Ok(b) = ob.downcast_exact::<PyBytes>() {
        return Ok(Some(b.clone()));
    }
    let py = ob.py();
    let t = secret_type(py)?;
    if !ob.get_type().is(t.cls.bind(py)) {
        return Ok(None);
    }
    let b = ob.getattr(pyo3::intern!(py, "_b"))?;
    Ok(b.downcast_into_exact::<PyBytes>().ok())
}

#[inline]
fn bit(b: u64) -> &'static [u8] {
    if b & 1 == 1 {
        b"1"
    } else {
        b"0"
    }
}

/// Walk down a chain whose labels are the characters of `labels` (UTF-8 each).
pub fn chain_chars(key: &[u8], labels: &str) -> Vec<u8> {
    if let (Ok(k), true) = (<&Key>::try_from(key), labels.is_ascii()) {
        return chain_bytes(k, labels.as_bytes()).to_vec();
    }
    let mut buf = [0u8; 4];
    let mut it = labels.chars();
    let Some(c0) = it.next() else {
        return key.to_vec();
    };
    let mut k = step(key, c0.encode_utf8(&mut buf).as_bytes());
    for c in it {
        k = step(&k, c.encode_utf8(&mut buf).as_bytes());
    }
    k.to_vec()
}

fn is_bits(s: &str) -> bool {
    s.bytes().all(|b| b == b'0' || b == b'1')
}

fn as_key(root: &[u8]) -> PyResult<Key> {
    root.try_into()
        .map_err(|_| PyValueError::new_err("a tree key is 32 bytes"))
}

/// A position in a NAKT walk: one block holding the current key, a bit's slot and the
/// padding of a 33-byte message (FIPS 180-4 §5.1.1), set once. `down` writes the child's key
/// straight back over the key part (as `chain_bytes` does), `child` hashes a copy, so a step
/// rebuilds no block and moves no key between buffers.
#[derive(Clone, Copy)]
struct Walker {
    block: Block,
}

impl Walker {
    fn new(k: &Key) -> Self {
        let mut block = Block::default();
        block[..32].copy_from_slice(k);
        block[33] = 0x80;
        block[56..].copy_from_slice(&(33u64 * 8).to_be_bytes());
        Walker { block }
    }

    fn key(&self) -> Key {
        let mut out = [0u8; 32];
        out.copy_from_slice(&self.block[..32]);
        out
    }

    /// The state after `H(K || b)` on this block with bit `b` (psguard.txt §3.1).
    #[inline]
    fn hash(block: &mut Block, b: u64) -> [u32; 8] {
        block[32] = if b & 1 == 1 { b'1' } else { b'0' };
        let mut st = H0;
        sha2::compress256(&mut st, std::slice::from_ref(block));
        st
    }

    /// Move to child `b`: `K <- H(K || b)`.
    #[inline]
    fn down(&mut self, b: u64) {
        let st = Self::hash(&mut self.block, b);
        for (o, w) in self.block[..32].chunks_exact_mut(4).zip(st) {
            o.copy_from_slice(&w.to_be_bytes());
        }
    }

    /// The key of child `b`, staying here.
    #[inline]
    fn child(&self, b: u64) -> Key {
        let mut block = self.block;
        let st = Self::hash(&mut block, b);
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(st) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }
}

/// The minimal cover of leaf interval `[lo, hi]` with its keys, left to right, in one
/// top-down walk (psguard.txt §3.1: at most `4 log2(|R|/lc) - 2` hashes). The same walk as
/// `pubguard.keys.nakt.cover_keys`. Below the split the left and right boundary paths are
/// independent, so they advance in lockstep (a CPU whose SHA unit pipelines overlaps them);
/// the left boundary's nodes are then reversed in place and the right's appended.
pub fn cover_keys(root: &Key, lo: u64, hi: u64, m: u32) -> Vec<(u64, Key)> {
    let mask_of = |rem: u32| (1u64 << rem) - 1;
    let (mut w, mut node, mut d) = (Walker::new(root), 1u64, 0u32);
    loop {
        let rem = m - d;
        let mask = mask_of(rem);
        if lo & mask == 0 && hi & mask == mask {
            return vec![(node, w.key())];
        }
        let bl = (lo >> (rem - 1)) & 1;
        if bl != (hi >> (rem - 1)) & 1 {
            break;
        }
        w.down(bl);
        node = 2 * node + bl;
        d += 1;
    }
    let mut left: Vec<(u64, Key)> = Vec::with_capacity(2 * (m - d) as usize);
    let mut right: Vec<(u64, Key)> = Vec::with_capacity((m - d) as usize);
    let (mut lcur, mut lw) = (2 * node, w);
    let (mut rcur, mut rw) = (2 * node + 1, w);
    lw.down(0);
    rw.down(1);
    let (mut ldone, mut rdone) = (false, false);
    for depth in d + 1..=m {
        let rem = m - depth;
        let mask = mask_of(rem);
        if !ldone {
            if lo & mask == 0 {
                left.push((lcur, lw.key()));
                ldone = true;
            } else if (lo >> (rem - 1)) & 1 == 1 {
                lcur = 2 * lcur + 1;
                lw.down(1);
            } else {
                left.push((2 * lcur + 1, lw.child(1)));
                lcur *= 2;
                lw.down(0);
            }
        }
        if !rdone {
            if hi & mask == mask {
                right.push((rcur, rw.key()));
                rdone = true;
            } else if (hi >> (rem - 1)) & 1 == 1 {
                right.push((2 * rcur, rw.child(0)));
                rcur = 2 * rcur + 1;
                rw.down(1);
            } else {
                rcur *= 2;
                rw.down(0);
            }
        }
        if ldone && rdone {
            break;
        }
    }
    left.reverse();
    left.extend_from_slice(&right);
    left
}

/// The ktid of heap node `n` (n >= 1): its binary form without the leading 1, written into
/// `buf`.
pub fn heap_ktid(n: u64, buf: &mut [u8; 64]) -> &str {
    let depth = (63 - n.leading_zeros()) as usize;
    for (i, b) in buf[..depth].iter_mut().enumerate() {
        *b = if (n >> (depth - 1 - i)) & 1 == 1 {
            b'1'
        } else {
            b'0'
        };
    }
    std::str::from_utf8(&buf[..depth]).unwrap_or("")
}

fn check_interval(lo: u64, hi: u64, m: u32) -> PyResult<()> {
    if m > MAX_NATIVE_DEPTH || lo > hi || hi >> m != 0 {
        return Err(PyValueError::new_err("leaf interval outside the tree"));
    }
    Ok(())
}

/// `K <- H(K || utf8(c))` for each character `c` of `labels` (NAKT bits, string chains).
#[pyfunction]
fn derive_chars<'py>(py: Python<'py>, key: &[u8], labels: &str) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &chain_chars(key, labels))
}

/// `K <- H(K || utf8(label))` for each label (category trees: one name per step).
#[pyfunction]
fn derive_labels<'py>(py: Python<'py>, key: &[u8], labels: Vec<String>) -> Bound<'py, PyBytes> {
    let mut k = key.to_vec();
    for lab in &labels {
        k = step(&k, lab.as_bytes()).to_vec();
    }
    PyBytes::new(py, &k)
}

/// psguard.txt §3.1: the key of `target` from the key of `auth`, or None when either is not a
/// bit string or `auth` is not a prefix of `target` (the caller raises the typed error).
#[pyfunction]
fn derive_from<'py>(
    py: Python<'py>,
    auth: &str,
    key: &[u8],
    target: &str,
) -> Option<Bound<'py, PyBytes>> {
    if !is_bits(auth) || !is_bits(target) || !target.starts_with(auth) {
        return None;
    }
    Some(PyBytes::new(py, &chain_chars(key, &target[auth.len()..])))
}

/// `pubguard.keys.nakt.derive_from` in one call: the key of `target` from the key of `auth`
/// (bytes or `SecretBytes`), as a new `SecretBytes`. None when either ktid is not exactly a
/// `str` of bits, `auth` is not a prefix of `target`, or the key is neither bytes nor
/// `SecretBytes`: the caller then runs the reference, which raises its typed error.
#[pyfunction]
fn derive_secret<'py>(
    py: Python<'py>,
    auth: &Bound<'py, PyAny>,
    key: &Bound<'py, PyAny>,
    target: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let (Ok(a), Ok(t)) = (
        auth.downcast_exact::<PyString>(),
        target.downcast_exact::<PyString>(),
    ) else {
        return Ok(None);
    };
    let (Ok(a), Ok(t)) = (a.to_str(), t.to_str()) else {
        return Ok(None);
    };
    if !is_bits(a) || !is_bits(t) || !t.starts_with(a) {
        return Ok(None);
    }
    let Some(k) = key_bytes(key)? else {
        return Ok(None);
    };
    let rest = &t.as_bytes()[a.len()..];
    let out = match <&Key>::try_from(k.as_bytes()) {
        Ok(k32) => chain_bytes(k32, rest),
        Err(_) => match rest.split_first() {
            Some((b0, more)) => chain_bytes(&step(k.as_bytes(), &[*b0]), more),
            None => return secret_new(py, k.as_bytes()).map(Some),
        },
    };
    secret_new(py, &out).map(Some)
}

/// What `derive_from_api` hands back to: the Python reference `pubguard.keys.nakt._derive_from`
/// and the module whose `NATIVE` names the active backend (`pubguard.native`). Set once, by
/// `bind_derive_from` when `pubguard.keys.nakt` is imported.
struct DeriveRef {
    reference: PyObject,
    /// `pubguard.native.__dict__` (a dict lookup per call is cheaper than an attribute read)
    backend: Py<PyDict>,
}

static DERIVE_REF: GILOnceCell<DeriveRef> = GILOnceCell::new();

/// Bind `derive_from_api`'s reference (the first binding stays: a module reloaded keeps
/// calling the reference it was first given, which computes the same keys).
#[pyfunction]
fn bind_derive_from(py: Python<'_>, reference: PyObject) -> PyResult<()> {
    if !reference.bind(py).is_callable() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "the derive_from reference must be callable",
        ));
    }
    let backend = py.import("pubguard.native")?.dict().unbind();
    let _ = DERIVE_REF.set(py, DeriveRef { reference, backend });
    Ok(())
}

/// `pubguard.keys.nakt.derive_from` as a user calls it on the native backend: one native call
/// (a builtin function, no Python frame around it). While the backend is native
/// (`pubguard.native.NATIVE`, read per call, so `pubguard.native.use` switches it) it runs
/// `derive_secret`; the Python backend, and every input the fast path declines, go to the
/// bound reference, which derives on the reference path or raises the typed error.
#[pyfunction]
fn derive_from_api<'py>(
    py: Python<'py>,
    auth_ktid: &Bound<'py, PyAny>,
    auth_key: &Bound<'py, PyAny>,
    target_ktid: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let Some(r) = DERIVE_REF.get(py) else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "derive_from_api is not bound (import pubguard.keys.nakt)",
        ));
    };
    let native = r
        .backend
        .bind(py)
        .get_item(pyo3::intern!(py, "NATIVE"))?
        .is_some_and(|n| !n.is_none());
    if native {
        if let Some(k) = derive_secret(py, auth_ktid, auth_key, target_ktid)? {
            return Ok(k);
        }
    }
    r.reference
        .bind(py)
        .call1((auth_ktid, auth_key, target_ktid))
}

/// `[(heap index, key)]` of the minimal cover of `[lo, hi]` (leaf units, depth `m`).
#[pyfunction(name = "cover_keys")]
fn py_cover_keys<'py>(
    py: Python<'py>,
    root: &[u8],
    lo: u64,
    hi: u64,
    m: u32,
) -> PyResult<Vec<(u64, Bound<'py, PyBytes>)>> {
    check_interval(lo, hi, m)?;
    let root = as_key(root)?;
    Ok(cover_keys(&root, lo, hi, m)
        .into_iter()
        .map(|(n, k)| (n, PyBytes::new(py, &k)))
        .collect())
}

/// The key of heap node `n` from its nearest ancestor in `memo` (`{heap index: key}`, the root
/// at 1), memoising every key on the way down (`pubguard.keys.kdc.TopicKeys._node`).
#[pyfunction]
fn memo_node<'py>(
    py: Python<'py>,
    memo: &Bound<'py, PyDict>,
    n: u64,
) -> PyResult<Bound<'py, PyAny>> {
    if n == 0 || n >> (MAX_NATIVE_DEPTH + 1) != 0 {
        return Err(PyValueError::new_err("heap index outside the tree"));
    }
    if let Some(k) = memo.get_item(n)? {
        return Ok(k);
    }
    let mut a = n;
    let mut path: Vec<u64> = Vec::with_capacity(64);
    let start = loop {
        path.push(a & 1);
        a >>= 1;
        if a == 0 {
            return Err(PyValueError::new_err("the tree root is not memoised"));
        }
        if let Some(k) = memo.get_item(a)? {
            break k;
        }
    };
    let mut k: Vec<u8> = start.extract()?;
    let mut last = start;
    for b in path.into_iter().rev() {
        a = (a << 1) | b;
        k = step(&k, bit(b)).to_vec();
        let kb = PyBytes::new(py, &k).into_any();
        memo.set_item(a, &kb)?;
        last = kb;
    }
    Ok(last)
}

/// psguard.txt §3.1 "Authorization Key": the minimal cover's keys as one object, a read-only
/// mapping `{ktid: SecretBytes}` in cover order (left to right). The raw keys stay here; a
/// `SecretBytes` is made only when a value is read (`wrap(bytes)`), so generating a cover
/// costs the walk and one Python object. The repr names only the number of keys; not
/// picklable (a subscriber's keys leave a process only through the key service's sealing).
#[pyclass(module = "pubguard._native", frozen, mapping)]
pub struct AuthKeys {
    nodes: Vec<(u64, Key)>,
    wrap: Py<PyAny>,
}

impl AuthKeys {
    fn find(&self, ktid: &str) -> Option<&Key> {
        if ktid.len() > MAX_NATIVE_DEPTH as usize || !is_bits(ktid) {
            return None;
        }
        let n = ktid
            .bytes()
            .fold(1u64, |n, b| (n << 1) | u64::from(b == b'1'));
        self.nodes.iter().find(|(h, _)| *h == n).map(|(_, k)| k)
    }

    fn ktids(&self) -> Vec<String> {
        let mut buf = [0u8; 64];
        self.nodes
            .iter()
            .map(|(n, _)| heap_ktid(*n, &mut buf).to_owned())
            .collect()
    }

    fn wrap_key<'py>(&self, py: Python<'py>, k: &Key) -> PyResult<Bound<'py, PyAny>> {
        let wrap = self.wrap.bind(py);
        if is_secret_class(wrap)? {
            return secret_new(py, k);
        }
        wrap.call1((PyBytes::new(py, k),))
    }
}

#[pymethods]
impl AuthKeys {
    fn __len__(&self) -> usize {
        self.nodes.len()
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        ktid: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = ktid.extract::<&str>().ok().and_then(|s| self.find(s));
        match key {
            Some(k) => self.wrap_key(py, k),
            None => Err(pyo3::exceptions::PyKeyError::new_err(ktid.clone().unbind())),
        }
    }

    fn __contains__(&self, ktid: &Bound<'_, PyAny>) -> bool {
        ktid.extract::<&str>()
            .ok()
            .and_then(|s| self.find(s))
            .is_some()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pyo3::types::PyList::new(py, self.ktids())?
            .as_any()
            .try_iter()
            .map(|i| i.into_any())
    }

    fn keys(&self) -> Vec<String> {
        self.ktids()
    }

    fn values<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.nodes
            .iter()
            .map(|(_, k)| self.wrap_key(py, k))
            .collect()
    }

    fn items<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
        self.ktids()
            .into_iter()
            .zip(&self.nodes)
            .map(|(t, (_, k))| Ok((t, self.wrap_key(py, k)?)))
            .collect()
    }

    #[pyo3(signature = (ktid, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        ktid: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match ktid.extract::<&str>().ok().and_then(|s| self.find(s)) {
            Some(k) => Ok(Some(self.wrap_key(py, k)?)),
            None => Ok(default),
        }
    }

    /// Equal to another `AuthKeys` with the same nodes and keys, or to any mapping with the
    /// same ktids whose values are equal to ours (`SecretBytes` compares in constant time).
    fn __eq__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<bool> {
        if let Ok(o) = other.downcast::<AuthKeys>() {
            let o = o.get();
            let same_nodes = o.nodes.len() == self.nodes.len()
                && o.nodes.iter().zip(&self.nodes).all(|(a, b)| a.0 == b.0);
            let diff = o.nodes.iter().zip(&self.nodes).fold(0u8, |acc, (a, b)| {
                acc | a.1.iter().zip(&b.1).fold(0, |x, (p, q)| x | (p ^ q))
            });
            return Ok(same_nodes && diff == 0);
        }
        if other.len().ok() != Some(self.nodes.len()) || !other.hasattr("keys")? {
            return Ok(false);
        }
        for (t, (_, k)) in self.ktids().into_iter().zip(&self.nodes) {
            let Ok(v) = other.get_item(&t) else {
                return Ok(false);
            };
            if !v.eq(self.wrap_key(py, k)?)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn __repr__(&self) -> String {
        format!("AuthKeys(<{} keys>)", self.nodes.len())
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "AuthKeys is not picklable",
        ))
    }
}

/// An exact Python `int` (not `bool`) that fits an `i64`.
fn exact_int(x: &Bound<'_, PyAny>) -> Option<i64> {
    x.downcast_exact::<pyo3::types::PyInt>()
        .ok()?
        .extract()
        .ok()
}

/// `pubguard.keys.nakt.nakt_leaf_bounds` for the inputs it accepts, `None` otherwise (the
/// caller then runs the reference, which raises the typed error).
fn leaf_bounds(
    low: &Bound<'_, PyAny>,
    high: &Bound<'_, PyAny>,
    range_size: &Bound<'_, PyAny>,
    least_count: &Bound<'_, PyAny>,
    snap: bool,
) -> Option<(u64, u64, u32)> {
    let (low, high) = (exact_int(low)?, exact_int(high)?);
    let (r, lc) = (exact_int(range_size)?, exact_int(least_count)?);
    if r <= 0 || lc <= 0 || r % lc != 0 {
        return None;
    }
    let leaves = (r / lc) as u64;
    if !leaves.is_power_of_two() || leaves.trailing_zeros() > MAX_NATIVE_DEPTH {
        return None;
    }
    if !(0..r).contains(&low) || !(0..r).contains(&high) || low > high {
        return None;
    }
    let (low, high) = if snap {
        (low - low % lc, high - high % lc + lc - 1)
    } else if low % lc != 0 || (high + 1) % lc != 0 {
        return None;
    } else {
        (low, high)
    };
    Some((
        (low / lc) as u64,
        (high / lc) as u64,
        leaves.trailing_zeros(),
    ))
}

/// psguard.txt §3.1, `TopicKeys.numeric_auth_keys` in one call: the NAKT root
/// `K_root = KH_{K(w)}(num)` (with `kh` = this topic's `KeyedHash`), the range in leaf units,
/// and the cover's keys as one `AuthKeys`, memoised in `memo` (a dict keyed by the arguments,
/// cleared when it holds `memo_max`; only exact `str`/`int` arguments reach it, since
/// `1.0 == 1`). `None` for any input the reference would refuse or that the port does not
/// model (not a native `KeyedHash`, an attribute name that is not a non-empty str without
/// NUL, a bool or float, a bad range), so the caller's reference decides and raises.
#[pyfunction]
#[pyo3(signature = (kh, memo, memo_max, attr, low, high, range_size, least_count, snap, wrap))]
fn numeric_cover<'py>(
    py: Python<'py>,
    kh: &Bound<'py, PyAny>,
    memo: &Bound<'py, PyDict>,
    memo_max: usize,
    attr: &Bound<'py, PyAny>,
    low: &Bound<'py, PyAny>,
    high: &Bound<'py, PyAny>,
    range_size: &Bound<'py, PyAny>,
    least_count: &Bound<'py, PyAny>,
    snap: &Bound<'py, PyAny>,
    wrap: Py<PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Ok(kh) = kh.downcast_exact::<KeyedHash>() else {
        return Ok(None);
    };
    let Ok(name) = attr.downcast_exact::<PyString>() else {
        return Ok(None);
    };
    let snap = snap.is_truthy()?;
    let Some((lo, hi, m)) = leaf_bounds(low, high, range_size, least_count, snap) else {
        return Ok(None);
    };
    let name_str = name.to_str()?;
    if name_str.is_empty() || name_str.contains('\0') {
        return Ok(None);
    }
    let key = (name, lo, hi, m).into_pyobject(py)?; // built once: looked up, then stored
    if let Some(hit) = memo.get_item(&key)? {
        return Ok(Some(hit));
    }
    let mut mac = kh.get().mac.clone();
    mac.update(name_str.as_bytes());
    let root: Key = mac.finalize().into_bytes().into();
    let got = Bound::new(
        py,
        AuthKeys {
            nodes: cover_keys(&root, lo, hi, m),
            wrap,
        },
    )?
    .into_any();
    if memo.len() >= memo_max {
        memo.clear();
    }
    memo.set_item(&key, &got)?;
    Ok(Some(got))
}

/// `KH_k` (HMAC-SHA256) with the key's pad states computed once (RFC 2104 §4), the twin of
/// `pubguard.crypto.KeyedHash`: `KeyedHash(k)(x) == KH(k, x)`. Not picklable; the repr shows
/// nothing of the key.
#[pyclass(module = "pubguard._native", frozen)]
pub struct KeyedHash {
    mac: HmacSha256,
}

#[pymethods]
impl KeyedHash {
    /// `KeyedHash(key)`: `key` is bytes or a `SecretBytes`.
    #[new]
    fn new(key: &Bound<'_, PyAny>) -> PyResult<Self> {
        let Some(k) = key_bytes(key)? else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a KeyedHash key is bytes or SecretBytes",
            ));
        };
        let mac = HmacSha256::new_from_slice(k.as_bytes())
            .map_err(|_| PyValueError::new_err("HMAC key rejected"))?;
        Ok(Self { mac })
    }

    fn __call__<'py>(&self, py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
        let mut m = self.mac.clone();
        m.update(data);
        PyBytes::new(py, &m.finalize().into_bytes())
    }

    /// `SecretBytes(KH_k(utf8(label)))` when `label` is exactly a non-empty `str` without NUL
    /// (`pubguard.keys.kdc.label`'s rule), else None: the caller's reference raises.
    /// psguard.txt §3.1: `K(w) = KH_rk(w)` at the KDC in one call.
    fn secret<'py>(
        &self,
        py: Python<'py>,
        label: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Ok(s) = label.downcast_exact::<PyString>() else {
            return Ok(None);
        };
        let Ok(s) = s.to_str() else {
            return Ok(None);
        };
        if s.is_empty() || s.contains('\0') {
            return Ok(None);
        }
        let mut m = self.mac.clone();
        m.update(s.as_bytes());
        secret_new(py, &m.finalize().into_bytes()).map(Some)
    }

    fn __repr__(&self) -> &'static str {
        "KeyedHash(<secret>)"
    }
}

/// One-shot `KH_k(x)` (HMAC-SHA256).
#[pyfunction]
fn kh<'py>(py: Python<'py>, key: &[u8], data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let mut m =
        HmacSha256::new_from_slice(key).map_err(|_| PyValueError::new_err("HMAC key rejected"))?;
    m.update(data);
    Ok(PyBytes::new(py, &m.finalize().into_bytes()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_NATIVE_DEPTH", MAX_NATIVE_DEPTH)?;
    m.add_function(wrap_pyfunction!(derive_chars, m)?)?;
    m.add_function(wrap_pyfunction!(derive_labels, m)?)?;
    m.add_function(wrap_pyfunction!(derive_from, m)?)?;
    m.add_function(wrap_pyfunction!(derive_secret, m)?)?;
    m.add_function(wrap_pyfunction!(py_cover_keys, m)?)?;
    m.add_function(wrap_pyfunction!(memo_node, m)?)?;
    m.add_function(wrap_pyfunction!(kh, m)?)?;
    m.add_class::<KeyedHash>()?;
    m.add_function(wrap_pyfunction!(bind_derive_from, m)?)?;
    m.add_function(wrap_pyfunction!(derive_from_api, m)?)?;
    m.add_class::<AuthKeys>()?;
    // a read-only mapping to Python's eyes too: isinstance(x, collections.abc.Mapping)
    m.py()
        .import("collections.abc")?
        .getattr("Mapping")?
        .call_method1("register", (m.getattr("AuthKeys")?,))?;
    m.add_function(wrap_pyfunction!(numeric_cover, m)?)?;
    Ok(())
}

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
use pyo3::types::{PyBytes, PyDict, PyString};
use sha2::{Digest, Sha256};

/// A 32-byte tree key (every derived key is one SHA-256 output).
pub type Key = [u8; 32];
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
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(k);
    block[32..32 + l].copy_from_slice(label);
    block[32 + l] = 0x80;
    block[56..].copy_from_slice(&(((32 + l) as u64) * 8).to_be_bytes());
    let mut st = H0;
    sha2::compress256(&mut st, &[block.into()]);
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(4).zip(st) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    out
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

/// The minimal cover of leaf interval `[lo, hi]` with its keys, left to right, in one
/// top-down walk (psguard.txt §3.1: at most `4 log2(|R|/lc) - 2` hashes). The same walk as
/// `pubguard.keys.nakt.cover_keys`.
pub fn cover_keys(root: &Key, lo: u64, hi: u64, m: u32) -> Vec<(u64, Key)> {
    let mask_of = |rem: u32| (1u64 << rem) - 1;
    let (mut k, mut node, mut d) = (*root, 1u64, 0u32);
    loop {
        let rem = m - d;
        let mask = mask_of(rem);
        if lo & mask == 0 && hi & mask == mask {
            return vec![(node, k)];
        }
        let bl = (lo >> (rem - 1)) & 1;
        if bl != (hi >> (rem - 1)) & 1 {
            break;
        }
        k = step(&k, bit(bl));
        node = 2 * node + bl;
        d += 1;
    }
    let mut out: Vec<(u64, Key)> = Vec::with_capacity(2 * m as usize);
    let (mut cur, mut ck) = (2 * node, step(&k, b"0"));
    for depth in d + 1..=m {
        let rem = m - depth;
        if lo & mask_of(rem) == 0 {
            out.push((cur, ck));
            break;
        }
        if (lo >> (rem - 1)) & 1 == 1 {
            cur = 2 * cur + 1;
            ck = step(&ck, b"1");
        } else {
            out.push((2 * cur + 1, step(&ck, b"1")));
            cur *= 2;
            ck = step(&ck, b"0");
        }
    }
    out.reverse();
    let (mut cur, mut ck) = (2 * node + 1, step(&k, b"1"));
    for depth in d + 1..=m {
        let rem = m - depth;
        let mask = mask_of(rem);
        if hi & mask == mask {
            out.push((cur, ck));
            break;
        }
        if (hi >> (rem - 1)) & 1 == 1 {
            out.push((2 * cur, step(&ck, b"0")));
            cur = 2 * cur + 1;
            ck = step(&ck, b"1");
        } else {
            cur *= 2;
            ck = step(&ck, b"0");
        }
    }
    out
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

/// psguard.txt §3.1 "Authorization Key": `{ktid: wrap(key)}` for the minimal cover of
/// `[lo, hi]`, also memoised as `memo[heap index] = wrap(key)` (the same object).
#[pyfunction]
fn numeric_auth_keys<'py>(
    py: Python<'py>,
    root: &[u8],
    lo: u64,
    hi: u64,
    m: u32,
    memo: &Bound<'py, PyDict>,
    wrap: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    check_interval(lo, hi, m)?;
    let root = as_key(root)?;
    let out = PyDict::new(py);
    let mut buf = [0u8; 64];
    for (n, k) in cover_keys(&root, lo, hi, m) {
        let sb = wrap.call1((PyBytes::new(py, &k),))?;
        memo.set_item(n, &sb)?;
        out.set_item(PyString::new(py, heap_ktid(n, &mut buf)), sb)?;
    }
    Ok(out)
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

/// `KH_k` (HMAC-SHA256) with the key's pad states computed once (RFC 2104 §4), the twin of
/// `pubguard.crypto.KeyedHash`: `KeyedHash(k)(x) == KH(k, x)`. Not picklable; the repr shows
/// nothing of the key.
#[pyclass(module = "pubguard._native", frozen)]
pub struct KeyedHash {
    mac: HmacSha256,
}

#[pymethods]
impl KeyedHash {
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        let mac = HmacSha256::new_from_slice(key)
            .map_err(|_| PyValueError::new_err("HMAC key rejected"))?;
        Ok(Self { mac })
    }

    fn __call__<'py>(&self, py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
        let mut m = self.mac.clone();
        m.update(data);
        PyBytes::new(py, &m.finalize().into_bytes())
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
    m.add_function(wrap_pyfunction!(py_cover_keys, m)?)?;
    m.add_function(wrap_pyfunction!(numeric_auth_keys, m)?)?;
    m.add_function(wrap_pyfunction!(memo_node, m)?)?;
    m.add_function(wrap_pyfunction!(kh, m)?)?;
    m.add_class::<KeyedHash>()?;
    Ok(())
}

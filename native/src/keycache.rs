//! The key cache of psguard.txt §3.2.3 "Performance Enhancement", the native twin of
//! `pubguard.keys.cache.KeyCache`: pinned authorisation keys plus an LRU of derived keys, per
//! key tree; a derivation starts from the longest cached prefix of its target and caches every
//! intermediate key on the way down.
//!
//! Trees are any hashable Python objects, interned to small ids through a Python dict (so
//! Python's own hash and equality decide which trees are the same); nodes are a `str` (NAKT
//! ktids, prefix chains, reversed suffixes) or a tuple of `str` (category paths). Values are
//! the caller's `SecretBytes` objects, returned as the very objects cached.
//!
//! A (tree, node) pair is one byte string, `id (u32 LE) || tag || labels`: tag `S` and the
//! node's UTF-8 for a `str`, tag `T` and each name as `len (u32 LE) || UTF-8` for a tuple. The
//! first `i` labels of a node are then a prefix of its encoding, so the walk up to the longest
//! cached ancestor slices one buffer, and a hit is one hash lookup of a reused buffer (no
//! allocation). One index entry holds a pin and an LRU entry side by side, as the reference's
//! two maps do (a pinned key shadows a derived one of the same node).

use std::collections::HashMap;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use crate::keys::{is_secret_class, secret_new, step};

/// Bytes of the tree id and the tag that start every encoded node.
const HDR: usize = 5;
const NIL: usize = usize::MAX;

/// Encode (tree `id`, `node`) into `buf` (see the module notes).
fn encode_into(buf: &mut Vec<u8>, id: u32, node: &Bound<'_, PyAny>) -> PyResult<()> {
    buf.clear();
    buf.extend_from_slice(&id.to_le_bytes());
    if let Ok(s) = node.downcast::<PyString>() {
        buf.push(b'S');
        buf.extend_from_slice(s.to_str()?.as_bytes());
        return Ok(());
    }
    if let Ok(t) = node.downcast::<PyTuple>() {
        buf.push(b'T');
        for x in t.iter() {
            let name = x.downcast::<PyString>()?.to_str()?;
            let n = u32::try_from(name.len())
                .map_err(|_| PyTypeError::new_err("a category name is too long"))?;
            buf.extend_from_slice(&n.to_le_bytes());
            buf.extend_from_slice(name.as_bytes());
        }
        return Ok(());
    }
    Err(PyTypeError::new_err("a key tree node is a str or a tuple"))
}

/// `cuts[i]` = the length of the encoding of the node's first `i` labels (`cuts[0] = HDR`).
fn cuts(enc: &[u8]) -> Vec<usize> {
    let mut out = vec![HDR];
    if enc.get(HDR - 1) == Some(&b'S') {
        // a label is one character: a cut before every UTF-8 lead byte, and at the end
        for (i, &b) in enc.iter().enumerate().skip(HDR + 1) {
            if b & 0xC0 != 0x80 {
                out.push(i);
            }
        }
        if enc.len() > HDR {
            out.push(enc.len());
        }
    } else {
        let mut p = HDR;
        while let Some(len) = enc.get(p..p + 4) {
            let n = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            p += 4 + n;
            out.push(p);
        }
    }
    out
}

/// Label `j` of an encoded node (`cuts` from `cuts(enc)`).
fn label<'a>(enc: &'a [u8], cuts: &[usize], j: usize) -> &'a [u8] {
    let skip = if enc.get(HDR - 1) == Some(&b'S') {
        0
    } else {
        4
    };
    enc.get(cuts[j] + skip..cuts[j + 1]).unwrap_or(&[])
}

struct Entry {
    key: Box<[u8]>,
    raw: Vec<u8>,
    obj: Py<PyAny>,
    prev: usize,
    next: usize,
}

/// A bounded LRU's order: entries in a slab, linked from least (`head`) to most (`tail`)
/// recently used, so a hit is a few index updates.
struct Lru {
    slab: Vec<Option<Entry>>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
    len: usize,
}

impl Lru {
    fn new() -> Self {
        Lru {
            slab: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    fn entry(&mut self, i: usize) -> Option<&mut Entry> {
        self.slab.get_mut(i).and_then(|e| e.as_mut())
    }

    fn get(&self, i: usize) -> Option<&Entry> {
        self.slab.get(i).and_then(|e| e.as_ref())
    }

    fn unlink(&mut self, i: usize) {
        let Some((prev, next)) = self.entry(i).map(|e| (e.prev, e.next)) else {
            return;
        };
        match self.entry(prev) {
            Some(p) => p.next = next,
            None => self.head = next,
        }
        match self.entry(next) {
            Some(n) => n.prev = prev,
            None => self.tail = prev,
        }
    }

    fn push_back(&mut self, i: usize) {
        let tail = self.tail;
        if let Some(e) = self.entry(i) {
            e.prev = tail;
            e.next = NIL;
        }
        match self.entry(tail) {
            Some(t) => t.next = i,
            None => self.head = i,
        }
        self.tail = i;
    }

    /// Make entry `i` the most recently used.
    fn touch(&mut self, i: usize) {
        if self.tail != i {
            self.unlink(i);
            self.push_back(i);
        }
    }

    fn insert(&mut self, e: Entry) -> usize {
        let i = match self.free.pop() {
            Some(i) => {
                self.slab[i] = Some(e);
                i
            }
            None => {
                self.slab.push(Some(e));
                self.slab.len() - 1
            }
        };
        self.push_back(i);
        self.len += 1;
        i
    }

    fn remove(&mut self, i: usize) -> Option<Entry> {
        self.unlink(i);
        let e = self.slab.get_mut(i).and_then(Option::take)?;
        self.free.push(i);
        self.len -= 1;
        Some(e)
    }
}

/// What the cache holds for one (tree, node): a pinned key, a derived one, or both.
#[derive(Default)]
struct Slot {
    pinned: Option<(Vec<u8>, Py<PyAny>)>,
    derived: Option<usize>,
}

/// Pinned keys plus a bounded LRU of derived keys (see the module notes).
#[pyclass(module = "pubguard._native")]
pub struct KeyCache {
    capacity: usize,
    wrap: Py<PyAny>,
    /// the exception type a derivation with no cached ancestor raises (`KeyError_`)
    miss: Py<PyAny>,
    /// `wrap` is `SecretBytes` itself: values are made without its Python `__init__`
    wrap_secret: bool,
    tree_ids: Py<PyDict>,
    index: HashMap<Box<[u8]>, Slot>,
    lru: Lru,
    pinned: usize,
    /// the encoding of the node being looked up (reused: a hit allocates nothing)
    buf: Vec<u8>,
    #[pyo3(get)]
    hits: u64,
    #[pyo3(get)]
    misses: u64,
}

impl KeyCache {
    fn tree_id(
        &self,
        py: Python<'_>,
        tree: &Bound<'_, PyAny>,
        create: bool,
    ) -> PyResult<Option<u32>> {
        let ids = self.tree_ids.bind(py);
        if let Some(v) = ids.get_item(tree)? {
            return Ok(Some(v.extract()?));
        }
        if !create {
            return Ok(None);
        }
        let id =
            u32::try_from(ids.len()).map_err(|_| PyTypeError::new_err("too many key trees"))?;
        ids.set_item(tree, id)?;
        Ok(Some(id))
    }

    /// The cached key of an encoded node, pinned first, then derived (a derived hit becomes
    /// most recently used): (raw key, value object).
    fn lookup(&mut self, enc: &[u8]) -> Option<(&[u8], &Py<PyAny>)> {
        let slot = self.index.get(enc)?;
        if let Some((raw, obj)) = &slot.pinned {
            return Some((raw, obj));
        }
        let i = slot.derived?;
        self.lru.touch(i);
        self.lru.get(i).map(|e| (e.raw.as_slice(), &e.obj))
    }

    fn evict(&mut self, i: usize) {
        let Some(e) = self.lru.remove(i) else {
            return;
        };
        if let Some(slot) = self.index.get_mut(&e.key) {
            slot.derived = None;
            if slot.pinned.is_none() {
                self.index.remove(&e.key);
            }
        }
    }

    /// Cache a derived key, unless the node is pinned; evict down to `capacity`.
    fn put(&mut self, enc: &[u8], raw: Vec<u8>, obj: Py<PyAny>) {
        let slot = self.index.entry(enc.into()).or_default();
        if slot.pinned.is_none() {
            match slot.derived {
                Some(i) => {
                    if let Some(e) = self.lru.entry(i) {
                        e.raw = raw;
                        e.obj = obj;
                    }
                    self.lru.touch(i);
                }
                None => {
                    slot.derived = Some(self.lru.insert(Entry {
                        key: enc.into(),
                        raw,
                        obj,
                        prev: NIL,
                        next: NIL,
                    }));
                }
            }
        }
        while self.lru.len > self.capacity {
            self.evict(self.lru.head);
        }
    }

    fn wrap_key<'py>(&self, py: Python<'py>, k: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        if self.wrap_secret {
            return secret_new(py, k);
        }
        self.wrap.bind(py).call1((PyBytes::new(py, k),))
    }

    /// The miss path of `derive`: from the longest cached proper prefix of the node encoded
    /// in `enc`, caching every key on the way down; None when no prefix is cached.
    fn derive_down(&mut self, py: Python<'_>, enc: &[u8]) -> PyResult<Option<Py<PyAny>>> {
        let cuts = cuts(enc);
        let labels = cuts.len() - 1;
        let mut start = None;
        for i in (0..labels).rev() {
            if let Some((raw, obj)) = self.lookup(&enc[..cuts[i]]) {
                start = Some((i, raw.to_vec(), obj.clone_ref(py)));
                break;
            }
        }
        let Some((i, mut key, mut out)) = start else {
            return Ok(None);
        };
        for j in i..labels {
            key = step(&key, label(enc, &cuts, j)).to_vec();
            out = self.wrap_key(py, &key)?.unbind();
            self.put(&enc[..cuts[j + 1]], key.clone(), out.clone_ref(py));
        }
        Ok(Some(out))
    }
}

#[pymethods]
impl KeyCache {
    /// `KeyCache(capacity, wrap, miss)`: `wrap(bytes)` makes the value objects
    /// (`SecretBytes`); `miss(message)` is raised when no cached key is an ancestor.
    #[new]
    fn new(
        py: Python<'_>,
        capacity: usize,
        wrap: Bound<'_, PyAny>,
        miss: Py<PyAny>,
    ) -> PyResult<Self> {
        Ok(Self {
            capacity,
            miss,
            wrap_secret: is_secret_class(&wrap)?,
            wrap: wrap.unbind(),
            tree_ids: PyDict::new(py).unbind(),
            index: HashMap::new(),
            lru: Lru::new(),
            pinned: 0,
            buf: Vec::new(),
            hits: 0,
            misses: 0,
        })
    }

    fn __len__(&self) -> usize {
        self.pinned + self.lru.len
    }

    fn __repr__(&self) -> String {
        format!(
            "KeyCache(pinned={}, derived={}, capacity={})",
            self.pinned, self.lru.len, self.capacity
        )
    }

    #[getter]
    fn capacity(&self) -> usize {
        self.capacity
    }

    #[getter]
    fn sizes(&self) -> (usize, usize) {
        (self.pinned, self.lru.len)
    }

    /// Pin the authorisation key `obj` (raw bytes `raw`) for `node` of `tree`.
    fn add(
        &mut self,
        py: Python<'_>,
        tree: &Bound<'_, PyAny>,
        node: &Bound<'_, PyAny>,
        obj: Py<PyAny>,
        raw: Vec<u8>,
    ) -> PyResult<()> {
        let mut enc = Vec::new();
        encode_into(&mut enc, 0, node)?; // checks the node before a tree id is made
        let Some(id) = self.tree_id(py, tree, true)? else {
            return Ok(());
        };
        enc[..4].copy_from_slice(&id.to_le_bytes());
        let slot = self.index.entry(enc.into()).or_default();
        if slot.pinned.is_none() {
            self.pinned += 1;
        }
        slot.pinned = Some((raw, obj));
        Ok(())
    }

    /// Key of `target` from the longest cached ancestor, caching the intermediates; `miss`
    /// (the reference's `KeyError_`, same message) when no cached key is an ancestor.
    fn derive(
        &mut self,
        py: Python<'_>,
        tree: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let id = self.tree_id(py, tree, false)?.unwrap_or(u32::MAX);
        let mut enc = std::mem::take(&mut self.buf);
        let got = encode_into(&mut enc, id, target).and_then(|()| {
            if let Some(obj) = self.lookup(&enc).map(|(_, o)| o.clone_ref(py)) {
                self.hits += 1;
                return Ok(Some(obj));
            }
            self.misses += 1;
            self.derive_down(py, &enc)
        });
        self.buf = enc;
        match got? {
            Some(k) => Ok(k),
            None => {
                let msg = format!(
                    "no cached authorisation key is an ancestor of {}",
                    target.repr()?
                );
                Err(PyErr::from_value(self.miss.bind(py).call1((msg,))?))
            }
        }
    }

    /// Drop every key of `tree`.
    fn forget_tree(&mut self, py: Python<'_>, tree: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some(id) = self.tree_id(py, tree, false)? else {
            return Ok(());
        };
        let tag = id.to_le_bytes();
        let doomed: Vec<Box<[u8]>> = self
            .index
            .keys()
            .filter(|k| k.starts_with(&tag))
            .cloned()
            .collect();
        for k in doomed {
            if let Some(slot) = self.index.remove(&k) {
                if slot.pinned.is_some() {
                    self.pinned -= 1;
                }
                if let Some(i) = slot.derived {
                    self.lru.remove(i);
                }
            }
        }
        Ok(())
    }

    fn clear(&mut self) {
        self.index.clear();
        self.lru = Lru::new();
        self.pinned = 0;
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<KeyCache>()
}

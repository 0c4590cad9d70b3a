//! The key cache of psguard.txt §3.2.3 "Performance Enhancement", the native twin of
//! `pubguard.keys.cache.KeyCache`: pinned authorisation keys plus an LRU of derived keys, per
//! key tree; a derivation starts from the longest cached prefix of its target and caches every
//! intermediate key on the way down.
//!
//! Trees are any hashable Python objects, interned to small ids through a Python dict (so
//! Python's own hash and equality decide which trees are the same); nodes are a `str` (NAKT
//! ktids, prefix chains, reversed suffixes) or a tuple of `str` (category paths). Values are
//! the caller's `SecretBytes` objects, returned as the very objects cached.

use std::collections::HashMap;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use crate::keys::step;

#[derive(Clone, PartialEq, Eq, Hash)]
enum Node {
    /// a string node: one label per character
    S(String),
    /// a category path: one label per name
    T(Vec<String>),
}

impl Node {
    fn extract(ob: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(s) = ob.downcast::<PyString>() {
            return Ok(Node::S(s.to_str()?.to_owned()));
        }
        if let Ok(t) = ob.downcast::<PyTuple>() {
            return Ok(Node::T(t.extract()?));
        }
        Err(PyTypeError::new_err("a key tree node is a str or a tuple"))
    }

    /// Number of labels (characters or names).
    fn len(&self) -> usize {
        match self {
            Node::S(s) => s.chars().count(),
            Node::T(t) => t.len(),
        }
    }

    /// The first `i` labels.
    fn prefix(&self, i: usize) -> Node {
        match self {
            Node::S(s) => {
                let end = s.char_indices().nth(i).map_or(s.len(), |(b, _)| b);
                Node::S(s[..end].to_owned())
            }
            Node::T(t) => Node::T(t[..i].to_vec()),
        }
    }

    /// The labels as bytes, in order.
    fn labels(&self) -> Vec<Vec<u8>> {
        match self {
            Node::S(s) => s.chars().map(|c| c.to_string().into_bytes()).collect(),
            Node::T(t) => t.iter().map(|x| x.as_bytes().to_vec()).collect(),
        }
    }
}

type Slot = (u32, Node);

const NIL: usize = usize::MAX;

struct Entry {
    slot: Slot,
    raw: Vec<u8>,
    obj: Py<PyAny>,
    prev: usize,
    next: usize,
}

/// A bounded LRU: entries in a slab, linked from least (`head`) to most (`tail`) recently
/// used, so a hit is one hash lookup and a few index updates.
#[derive(Default)]
struct Lru {
    index: HashMap<Slot, usize>,
    slab: Vec<Option<Entry>>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
}

impl Lru {
    fn new() -> Self {
        Lru {
            head: NIL,
            tail: NIL,
            ..Default::default()
        }
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn entry(&mut self, i: usize) -> Option<&mut Entry> {
        self.slab.get_mut(i).and_then(|e| e.as_mut())
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

    /// The entry of `slot`, made most recently used.
    fn get(&mut self, slot: &Slot) -> Option<&Entry> {
        let i = *self.index.get(slot)?;
        if self.tail != i {
            self.unlink(i);
            self.push_back(i);
        }
        self.slab.get(i).and_then(|e| e.as_ref())
    }

    fn remove(&mut self, slot: &Slot) {
        if let Some(i) = self.index.remove(slot) {
            self.unlink(i);
            self.slab[i] = None;
            self.free.push(i);
        }
    }

    fn put(&mut self, slot: Slot, raw: Vec<u8>, obj: Py<PyAny>) {
        self.remove(&slot);
        let e = Entry {
            slot: slot.clone(),
            raw,
            obj,
            prev: NIL,
            next: NIL,
        };
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
        self.index.insert(slot, i);
        self.push_back(i);
    }

    fn pop_front(&mut self) {
        let victim = self
            .slab
            .get(self.head)
            .and_then(|e| e.as_ref())
            .map(|e| e.slot.clone());
        if let Some(v) = victim {
            self.remove(&v);
        }
    }

    fn retain_trees(&mut self, id: u32) {
        let doomed: Vec<Slot> = self.index.keys().filter(|k| k.0 == id).cloned().collect();
        for s in &doomed {
            self.remove(s);
        }
    }

    fn clear(&mut self) {
        *self = Lru::new();
    }
}

/// Pinned keys plus a bounded LRU of derived keys (see the module notes).
#[pyclass(module = "pubguard._native")]
pub struct KeyCache {
    capacity: usize,
    wrap: Py<PyAny>,
    tree_ids: Py<PyDict>,
    pinned: HashMap<Slot, (Vec<u8>, Py<PyAny>)>,
    derived: Lru,
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

    /// A cached key's value object: pinned first, then derived (a derived hit becomes most
    /// recently used).
    fn lookup_obj(&mut self, py: Python<'_>, slot: &Slot) -> Option<Py<PyAny>> {
        if let Some((_, obj)) = self.pinned.get(slot) {
            return Some(obj.clone_ref(py));
        }
        self.derived.get(slot).map(|e| e.obj.clone_ref(py))
    }

    /// As `lookup_obj`, with the raw key (a derivation's starting point).
    fn lookup(&mut self, py: Python<'_>, slot: &Slot) -> Option<(Vec<u8>, Py<PyAny>)> {
        if let Some((raw, obj)) = self.pinned.get(slot) {
            return Some((raw.clone(), obj.clone_ref(py)));
        }
        self.derived
            .get(slot)
            .map(|e| (e.raw.clone(), e.obj.clone_ref(py)))
    }

    fn put(&mut self, slot: Slot, raw: Vec<u8>, obj: Py<PyAny>) {
        if self.pinned.contains_key(&slot) {
            return;
        }
        self.derived.put(slot, raw, obj);
        while self.derived.len() > self.capacity {
            self.derived.pop_front();
        }
    }
}

#[pymethods]
impl KeyCache {
    /// `KeyCache(capacity, wrap)`: `wrap(bytes)` makes the value objects (`SecretBytes`).
    #[new]
    fn new(py: Python<'_>, capacity: usize, wrap: Py<PyAny>) -> Self {
        Self {
            capacity,
            wrap,
            tree_ids: PyDict::new(py).unbind(),
            pinned: HashMap::new(),
            derived: Lru::new(),
            hits: 0,
            misses: 0,
        }
    }

    fn __len__(&self) -> usize {
        self.pinned.len() + self.derived.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "KeyCache(pinned={}, derived={}, capacity={})",
            self.pinned.len(),
            self.derived.len(),
            self.capacity
        )
    }

    #[getter]
    fn capacity(&self) -> usize {
        self.capacity
    }

    #[getter]
    fn sizes(&self) -> (usize, usize) {
        (self.pinned.len(), self.derived.len())
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
        let node = Node::extract(node)?;
        let Some(id) = self.tree_id(py, tree, true)? else {
            return Ok(());
        };
        self.pinned.insert((id, node), (raw, obj));
        Ok(())
    }

    /// Key of `target` from the longest cached ancestor, caching the intermediates; None when
    /// no cached key is an ancestor (the caller raises `KeyError_`).
    fn derive(
        &mut self,
        py: Python<'_>,
        tree: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let node = Node::extract(target)?;
        let id = self.tree_id(py, tree, false)?.unwrap_or(u32::MAX);
        let slot = (id, node);
        if let Some(obj) = self.lookup_obj(py, &slot) {
            self.hits += 1;
            return Ok(Some(obj));
        }
        self.misses += 1;
        let node = slot.1;
        let len = node.len();
        let mut start = None;
        for i in (0..len).rev() {
            let s = (id, node.prefix(i));
            if let Some((raw, obj)) = self.lookup(py, &s) {
                start = Some((i, raw, obj));
                break;
            }
        }
        let Some((i, mut key, mut out)) = start else {
            return Ok(None);
        };
        let labels = node.labels();
        let wrap = self.wrap.clone_ref(py);
        for (j, lab) in labels.iter().enumerate().skip(i) {
            key = step(&key, lab).to_vec();
            out = wrap.call1(py, (PyBytes::new(py, &key),))?;
            self.put((id, node.prefix(j + 1)), key.clone(), out.clone_ref(py));
        }
        Ok(Some(out))
    }

    /// Drop every key of `tree`.
    fn forget_tree(&mut self, py: Python<'_>, tree: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some(id) = self.tree_id(py, tree, false)? else {
            return Ok(());
        };
        self.pinned.retain(|k, _| k.0 != id);
        self.derived.retain_trees(id);
        Ok(())
    }

    fn clear(&mut self) {
        self.pinned.clear();
        self.derived.clear();
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<KeyCache>()
}

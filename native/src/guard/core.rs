//! The publication guard's pure core: no Python, no I/O, time as an argument.
//!
//! This file is the whole of what an attacker's bytes reach: the strict field parsers, the
//! Merkle climb with its cache of verified roots and authenticated inner nodes, the timestamp
//! window, EventGuard's routing guard (eventguard.txt §4.4, §4.7) and the default profile's
//! publication guard (its replay check, narada §V-B, is the owner's). It is a port of the
//! Python reference (`pubguard.schemes.common.merkle`, `.guards.SignedRootVerifier`,
//! `pubguard.schemes.eventguard.wire` and `.broker`, `pubguard.schemes.default.broker`,
//! `pubguard.schemes.psguard.wire` / `.record`), which stays the spec: the differential tests
//! (tests/schemes/*/test_*_native.py) compare verdicts on generated and mutated frames, and
//! the stable fuzz driver (native/fuzz/) runs this file on its own, without PyO3.
//!
//! What the Python reference would treat through a path this port does not model (integers
//! beyond 64 bits, `str`/`bytes` subclasses, strings that are not UTF-8) is `Fallback`:
//! decided before any state changes, and handed back to the Python guard whole.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};

pub const DIGEST: usize = 32;
/// merkle.py MAX_BATCH / MAX_PATH
pub const MAX_BATCH: i64 = 1 << 16;
pub const MAX_PATH: usize = 16;
/// eventguard/wire.py MAX_TOPICS, TOKEN_BYTES
pub const MAX_TOPICS: usize = 64;
pub const TOKEN_BYTES: usize = 32;
/// guards.py DEFAULT_MAX_NODES, replay.py DEFAULT_CACHE_CAPACITY
pub const DEFAULT_MAX_NODES: usize = 1 << 16;
pub const DEFAULT_CACHE_CAPACITY: usize = 65_536;
/// eventguard broker: publications' verified permits and parsed keys kept (then cleared)
pub const HOT_CAPACITY: usize = 4096;
const LEVEL_SHIFT: u32 = 17;

/// A drop reason (`pubguard.errors.DropReason` values this guard can give).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Malformed,
    Forged,
    Stale,
    Unauthorised,
    Revoked,
    Replayed,
}

impl Reason {
    /// The reason whose value is `s` (`as_str`'s inverse).
    pub fn parse(s: &str) -> Option<Reason> {
        [
            Reason::Malformed,
            Reason::Forged,
            Reason::Stale,
            Reason::Unauthorised,
            Reason::Revoked,
            Reason::Replayed,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::Forged => "forged",
            Reason::Stale => "stale",
            Reason::Unauthorised => "unauthorised",
            Reason::Revoked => "revoked",
            Reason::Replayed => "replayed",
        }
    }
}

/// One wire value as the guard sees it.
#[derive(Clone, Copy, Debug)]
pub enum Val<'a> {
    Missing,
    Str(&'a str),
    Bytes(&'a [u8]),
    Int(i64),
    Float(f64),
    /// None
    Null,
    /// bool, list, map: a type no field accepts
    Other,
    /// a value the reference treats in a way not modelled here (see the module docs)
    Fallback,
}

/// The verdict on one publication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Drop(Reason),
    Fallback,
}

impl Verdict {
    /// The verdict as the Python side reads it: "" to pass, a drop reason's value, or
    /// "fallback".
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Pass => "",
            Verdict::Drop(r) => r.as_str(),
            Verdict::Fallback => "fallback",
        }
    }
}

/// Whether any of `vals` is one the port does not model (the Python guard then decides).
pub fn any_fallback(vals: &[Val<'_>]) -> bool {
    vals.iter().any(|v| matches!(v, Val::Fallback))
}

fn sha(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

// -- Merkle (merkle.py) -------------------------------------------------------------------------

/// A new authenticated node found by `climb`: (key, hash, packed path above it).
pub type NewNode = (u64, [u8; 32], Vec<u8>);
/// Authenticated nodes of one verified tree: key -> (hash, packed path above it).
pub type NodeMap = HashMap<u64, ([u8; 32], Vec<u8>)>;

/// The most node slots a new tree's map is sized for up front (a batch of 512).
const MAX_PRESIZE: usize = 1024;

fn leaf_hash(leaf: &[u8], index: i64, size: i64) -> [u8; 32] {
    sha(&[
        b"\x00",
        &(index as u32).to_be_bytes(),
        &(size as u32).to_be_bytes(),
        leaf,
    ])
}

/// merkle.py `climb`: Err(()) is InvalidToken (forged).
pub fn climb(
    leaf: &[u8],
    index: i64,
    size: i64,
    blob: &[u8],
    known: Option<&NodeMap>,
) -> Result<([u8; 32], u64, Vec<NewNode>), ()> {
    if !(0 <= index && index < size && size <= MAX_BATCH) {
        return Err(());
    }
    let end = blob.len();
    if !end.is_multiple_of(DIGEST) || end > MAX_PATH * DIGEST {
        return Err(());
    }
    let mut h = leaf_hash(leaf, index, size);
    let (mut p, mut width, mut k, mut key) = (index as u64, size as u64, 0usize, index as u64);
    let mut new: Vec<NewNode> = Vec::new();
    loop {
        if let Some(known) = known {
            if let Some(node) = known.get(&key) {
                if node.0 != h || node.1[..] != blob[k..] {
                    return Err(());
                }
                return Ok((h, key, new));
            }
        }
        if width == 1 {
            if k != end {
                return Err(());
            }
            return Ok((h, key, new));
        }
        let lvl = key - p;
        if p ^ 1 < width {
            if k + DIGEST > end {
                return Err(());
            }
            let s = &blob[k..k + DIGEST];
            k += DIGEST;
            let rest = &blob[k..];
            new.push((key, h, [s, rest].concat()));
            let mut sib = [0u8; 32];
            sib.copy_from_slice(s);
            new.push((key ^ 1, sib, [&h[..], rest].concat()));
            h = if p & 1 == 0 {
                sha(&[b"\x01", &h, s])
            } else {
                sha(&[b"\x01", s, &h])
            };
        } else {
            new.push((key, h, blob[k..].to_vec()));
        }
        p >>= 1;
        width = (width + 1) >> 1;
        key = lvl + (1u64 << LEVEL_SHIFT) + p;
    }
}

/// A signature a guard would verify: the key, the signature and the signed bytes (the batch
/// pre-pass's item, `super::batch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SigItem {
    pub pk: Vec<u8>,
    pub sig: Vec<u8>,
    pub msg: Vec<u8>,
}

/// merkle.py `signed_root`: `tag || n || root`.
pub fn signed_root(tag: &[u8], root: &[u8; 32], size: i64) -> Vec<u8> {
    [tag, &(size as u32).to_be_bytes(), root].concat()
}

/// keys/cache.py `BoundedLru` with expiring entries (`TTLCache`): least recently used first out.
pub struct TtlLru<K: std::hash::Hash + Eq + Clone, V> {
    capacity: usize,
    map: HashMap<K, (f64, V, u64)>,
    order: BTreeMap<u64, K>,
    clock: u64,
}

#[allow(clippy::len_without_is_empty)]
impl<K: std::hash::Hash + Eq + Clone, V> TtlLru<K, V> {
    pub fn new(capacity: usize) -> Self {
        TtlLru {
            capacity,
            map: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
        }
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn get(&mut self, key: &K, now: f64) -> Option<&V> {
        let (expires, stamp) = match self.map.get(key) {
            None => return None,
            Some(e) => (e.0, e.2),
        };
        if now > expires {
            self.order.remove(&stamp);
            self.map.remove(key);
            return None;
        }
        self.clock += 1;
        let c = self.clock;
        self.order.remove(&stamp);
        self.order.insert(c, key.clone());
        let e = self.map.get_mut(key).expect("present");
        e.2 = c;
        Some(&e.1)
    }
    /// The live value of `key` without touching the LRU order or dropping an expired entry
    /// (the batch pre-pass reads state; it never changes it).
    pub fn peek(&self, key: &K, now: f64) -> Option<&V> {
        self.map.get(key).filter(|e| now <= e.0).map(|e| &e.1)
    }
    pub fn put(&mut self, key: K, value: V, expires: f64) {
        self.clock += 1;
        let c = self.clock;
        if let Some(old) = self.map.insert(key.clone(), (expires, value, c)) {
            self.order.remove(&old.2);
        }
        self.order.insert(c, key);
        while self.map.len() > self.capacity {
            let (_, k) = self.order.pop_first().expect("non-empty");
            self.map.remove(&k);
        }
    }
}

struct Tree {
    size: i64,
    expires: f64,
    root: [u8; 32],
    nodes: NodeMap,
    seq: u64,
}

/// guards.py `SignedRootVerifier`: verified `(key, root)` pairs and, per verified signature,
/// the batch's authenticated nodes (so a batch's leaves share their path).
pub struct RootVerifier {
    pub tag: Vec<u8>,
    pub ttl: f64,
    pub max_nodes: usize,
    cache: TtlLru<(Vec<u8>, [u8; 32]), Vec<u8>>,
    trees: HashMap<(Vec<u8>, Vec<u8>), Tree>,
    order: BTreeMap<u64, (Vec<u8>, Vec<u8>)>,
    seq: u64,
    nodes: usize,
    pub verifications: u64,
}

/// Why a verification failed: the path or signature (forged), or the caller's signature
/// check's own error.
pub enum VerifyError<E> {
    Forged,
    Sig(E),
}

impl RootVerifier {
    pub fn new(tag: &[u8], ttl: f64, capacity: usize, max_nodes: usize) -> Self {
        RootVerifier {
            tag: tag.to_vec(),
            ttl,
            max_nodes,
            cache: TtlLru::new(capacity),
            trees: HashMap::new(),
            order: BTreeMap::new(),
            seq: 0,
            nodes: 0,
            verifications: 0,
        }
    }

    pub fn cached_nodes(&self) -> usize {
        self.nodes
    }

    pub fn cached_trees(&self) -> usize {
        self.trees.len()
    }

    pub fn cached_roots(&self) -> usize {
        self.cache.len()
    }

    /// Whether `verify` would check the signature `sig` of `pk` on a tree whose root is
    /// `root`: no live verified tree of `(pk, sig)` and no live verified root of `pk` under
    /// this signature. Reads only (the batch pre-pass).
    pub fn needs_signature(&self, pk: &[u8], sig: &[u8], root: &[u8; 32], now: f64) -> bool {
        let tk = (pk.to_vec(), sig.to_vec());
        if self.trees.get(&tk).is_some_and(|t| now <= t.expires) {
            return false;
        }
        !matches!(self.cache.peek(&(tk.0, *root), now), Some(s) if s[..] == *sig)
    }

    fn drop_tree(&mut self, tk: &(Vec<u8>, Vec<u8>)) {
        if let Some(t) = self.trees.remove(tk) {
            self.order.remove(&t.seq);
            self.nodes -= t.nodes.len();
        }
    }

    /// `verify_packed`: the verified root. `check(message)` verifies the signature on
    /// `message` (called only when no verified root covers it).
    #[allow(clippy::too_many_arguments)]
    pub fn verify<E>(
        &mut self,
        pk: &[u8],
        leaf: &[u8],
        sig: &[u8],
        now: f64,
        index: i64,
        size: i64,
        path: &[u8],
        check: impl FnOnce(&[u8]) -> Result<(), E>,
    ) -> Result<[u8; 32], VerifyError<E>> {
        let tk = (pk.to_vec(), sig.to_vec());
        if let Some(tree) = self.trees.get(&tk) {
            if now > tree.expires {
                self.drop_tree(&tk);
            } else {
                if size != tree.size {
                    return Err(VerifyError::Forged);
                }
                if 0 <= index && index < size {
                    if let Some(node) = tree.nodes.get(&(index as u64)) {
                        if node.1[..] != *path || node.0 != leaf_hash(leaf, index, size) {
                            return Err(VerifyError::Forged);
                        }
                        return Ok(tree.root);
                    }
                }
                let root = tree.root;
                let (h, at, new) = climb(leaf, index, size, path, Some(&tree.nodes))
                    .map_err(|_| VerifyError::Forged)?;
                match tree.nodes.get(&at) {
                    Some(n) if n.0 == h => {}
                    _ => return Err(VerifyError::Forged),
                }
                if !new.is_empty() {
                    self.keep(&tk, new);
                }
                return Ok(root);
            }
        }
        let (root, at, mut new) =
            climb(leaf, index, size, path, None).map_err(|_| VerifyError::Forged)?;
        let ck = (pk.to_vec(), root);
        let cached = matches!(self.cache.get(&ck, now), Some(s) if s[..] == *sig);
        if !cached {
            self.verifications += 1;
            check(&signed_root(&self.tag, &root, size)).map_err(VerifyError::Sig)?;
            self.cache.put(ck, sig.to_vec(), now + self.ttl);
        }
        while let Some((_, first)) = self.order.first_key_value() {
            let first = first.clone();
            if now <= self.trees[&first].expires {
                break;
            }
            self.drop_tree(&first);
        }
        self.seq += 1;
        let tree = Tree {
            size,
            expires: now + self.ttl,
            root,
            // a batch's leaves add up to 2 * size - 1 nodes: sized once, not rehashed as
            // they arrive (bounded: the node budget, not this, limits what is kept)
            nodes: NodeMap::with_capacity(2 * size.clamp(1, MAX_PRESIZE as i64 / 2) as usize),
            seq: self.seq,
        };
        self.order.insert(self.seq, tk.clone());
        self.trees.insert(tk.clone(), tree);
        new.push((at, root, Vec::new()));
        self.keep(&tk, new);
        if self.trees[&tk].nodes.is_empty() {
            self.drop_tree(&tk);
        }
        Ok(root)
    }

    /// guards.py `_keep`: add nodes to the tree (all or none) within the node budget, the
    /// oldest other trees dropped first.
    fn keep(&mut self, tk: &(Vec<u8>, Vec<u8>), new: Vec<NewNode>) {
        let add = {
            // (a path's few nodes: counted without a set per call)
            let nodes = &self.trees[tk].nodes;
            new.iter()
                .enumerate()
                .filter(|(i, (k, _, _))| {
                    !nodes.contains_key(k) && !new[..*i].iter().any(|(j, _, _)| j == k)
                })
                .count()
        };
        if add == 0 {
            return;
        }
        while self.nodes + add > self.max_nodes {
            let oldest = self
                .order
                .first_key_value()
                .map(|(_, k)| k.clone())
                .expect("a tree");
            if oldest == *tk {
                return;
            }
            self.drop_tree(&oldest);
        }
        let tree = self.trees.get_mut(tk).expect("kept tree");
        for (k, h, tail) in new {
            tree.nodes.insert(k, (h, tail));
        }
        self.nodes += add;
    }
}

// -- EventGuard publications (eventguard/wire.py, eventguard/broker.py) --------------------------

/// eventguard/wire.py `unpack_items`: exactly `n` length-prefixed items.
pub fn unpack_items(blob: &[u8], n: usize) -> Option<Vec<&[u8]>> {
    let end = blob.len();
    let u32_at =
        |i: usize| u32::from_be_bytes([blob[i], blob[i + 1], blob[i + 2], blob[i + 3]]) as usize;
    if n == 1 && end >= 4 && u32_at(0) == end - 4 {
        return Some(vec![&blob[4..]]);
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < end {
        if i + 4 > end {
            return None;
        }
        let k = u32_at(i);
        i += 4;
        if k > end - i {
            return None;
        }
        out.push(&blob[i..i + k]);
        i += k;
    }
    if out.len() != n {
        return None;
    }
    Some(out)
}

/// eventguard/wire.py `parse_tokens`, given the routing part's only value.
pub fn parse_tokens(blob: &[u8]) -> Option<Vec<&[u8]>> {
    if !blob.len().is_multiple_of(TOKEN_BYTES) {
        return None;
    }
    let n = blob.len() / TOKEN_BYTES;
    if !(1..=MAX_TOPICS).contains(&n) {
        return None;
    }
    Some(blob.chunks(TOKEN_BYTES).collect())
}

/// A publication's `meta`, field by field (`Missing` where absent).
#[derive(Clone, Copy, Debug)]
pub struct EgMeta<'a> {
    pub p: Val<'a>,
    pub e: Val<'a>,
    pub ts: Val<'a>,
    pub sig: Val<'a>,
    pub mi: Val<'a>,
    pub mn: Val<'a>,
    pub mp: Val<'a>,
    pub wk: Val<'a>,
    pub ad: Val<'a>,
}

impl<'a> EgMeta<'a> {
    fn all(&self) -> [Val<'a>; 9] {
        [
            self.p, self.e, self.ts, self.sig, self.mi, self.mn, self.mp, self.wk, self.ad,
        ]
    }
}

/// The fields of a publication that passed eventguard/wire.py `parse_meta`.
pub struct EgFields<'a> {
    pub publisher: &'a str,
    pub epoch: i64,
    pub ts: f64,
    pub sig: &'a [u8],
    pub index: i64,
    pub size: i64,
    pub path: &'a [u8],
    pub wrapped: Vec<&'a [u8]>,
    pub permits: Vec<&'a [u8]>,
}

/// eventguard/wire.py `parse_meta` for `n` tokens: Err(None) is malformed, Err(Some) fallback.
pub fn parse_meta<'a>(m: &EgMeta<'a>, n: usize) -> Result<EgFields<'a>, Verdict> {
    if any_fallback(&m.all()) {
        return Err(Verdict::Fallback);
    }
    let bad = Err(Verdict::Drop(Reason::Malformed));
    let publisher = match m.p {
        Val::Str(s) if !s.is_empty() => s,
        _ => return bad,
    };
    let epoch = match m.e {
        Val::Int(e) if e >= 0 => e,
        _ => return bad,
    };
    let ts = match m.ts {
        Val::Int(t) => t as f64,
        Val::Float(t) if !t.is_nan() => t,
        _ => return bad,
    };
    let sig = match m.sig {
        Val::Bytes(b) => b,
        _ => return bad,
    };
    let index = match m.mi {
        Val::Missing => 0,
        Val::Int(i) => i,
        _ => return bad,
    };
    let size = match m.mn {
        Val::Missing => 1,
        Val::Int(i) => i,
        _ => return bad,
    };
    if !(0 <= index && index < size && size <= MAX_BATCH) {
        return bad;
    }
    let path: &[u8] = match m.mp {
        Val::Missing => b"",
        Val::Bytes(b) if b.len() % DIGEST == 0 && b.len() <= MAX_PATH * DIGEST => b,
        _ => return bad,
    };
    let wrapped = match m.wk {
        Val::Bytes(b) => unpack_items(b, n),
        _ => None,
    };
    let permits = match m.ad {
        Val::Bytes(b) => unpack_items(b, n),
        _ => None,
    };
    match (wrapped, permits) {
        (Some(wrapped), Some(permits)) => Ok(EgFields {
            publisher,
            epoch,
            ts,
            sig,
            index,
            size,
            path,
            wrapped,
            permits,
        }),
        _ => bad,
    }
}

fn lp(out: &mut Vec<u8>, t: u8, x: &[u8]) {
    out.push(t);
    out.extend_from_slice(&(x.len() as u32).to_be_bytes());
    out.extend_from_slice(x);
}

/// eventguard/wire.py `leaf_digest` (the `pack_fields` encoding).
pub fn eg_leaf(
    tag: &[u8],
    event_id: &str,
    profile: &str,
    f: &EgFields<'_>,
    tokens: &[&[u8]],
    body: &[u8],
) -> [u8; 32] {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(tag);
    lp(&mut out, b's', event_id.as_bytes());
    lp(&mut out, b's', profile.as_bytes());
    lp(&mut out, b's', f.publisher.as_bytes());
    out.push(b'i');
    out.extend_from_slice(&f.epoch.to_be_bytes());
    out.push(b'f');
    out.extend_from_slice(&f.ts.to_be_bytes());
    out.push(b'i');
    out.extend_from_slice(&(tokens.len() as i64).to_be_bytes());
    for x in tokens.iter().chain(f.wrapped.iter()) {
        lp(&mut out, b'b', x);
    }
    let hb: [u8; 32] = Sha256::digest(body).into();
    lp(&mut out, b'b', &hb);
    Sha256::digest(&out).into()
}

/// The fields of an MS advertisement permit the routing guard reads (keys/permits.py).
#[derive(Clone, Debug)]
pub struct AdPermit {
    pub token: Vec<u8>,
    pub subject: String,
    /// None: beyond 64 bits (never a publication's epoch here)
    pub epoch: Option<i64>,
    pub publisher_key: Vec<u8>,
    pub issued_at: f64,
    pub expires_at: f64,
}

/// What the guard asks of its owner: the MS-verified permit behind a blob (`Ok(None)`: a
/// permit of another kind), whether a key is revoked, the publisher's key, and a signature
/// check. `E`: the owner's error (a Python exception), passed through unchanged.
pub trait EgEnv {
    type Err;
    fn permit(&mut self, blob: &[u8]) -> Result<Option<AdPermit>, Self::Err>;
    fn revoked(&mut self, pk: &[u8]) -> Result<bool, Self::Err>;
    fn key(&mut self, pk: &[u8]) -> Result<(), Self::Err>;
    fn verify(&mut self, pk: &[u8], sig: &[u8], message: &[u8]) -> Result<(), Self::Err>;
}

/// EventGuard's routing guard state of one broker scheme (eventguard/broker.py).
pub struct EgGuard {
    pub max_delay: f64,
    pub leaf_tag: Vec<u8>,
    hot: HashMap<Vec<u8>, Option<AdPermit>>,
    keys: std::collections::HashSet<Vec<u8>>,
}

impl EgGuard {
    pub fn new(max_delay: f64, leaf_tag: &[u8]) -> Self {
        EgGuard {
            max_delay,
            leaf_tag: leaf_tag.to_vec(),
            hot: HashMap::new(),
            keys: Default::default(),
        }
    }

    /// The signature `check` would verify on this publication, with the key and the signed
    /// root it would verify it on, when that is known without asking the owner: a
    /// single-signature publication (Merkle size 1, eventguard.txt §4.4 without batching)
    /// inside the window whose permits were verified before and whose signature no verified
    /// root covers. Reads only: the batch pre-pass (`super::batch`).
    #[allow(clippy::too_many_arguments)]
    pub fn batch_item(
        &self,
        roots: &RootVerifier,
        event_id: &str,
        profile: &str,
        tokens_blob: &[u8],
        body: &[u8],
        meta: &EgMeta<'_>,
        now: f64,
    ) -> Option<SigItem> {
        let tokens = parse_tokens(tokens_blob)?;
        let f = parse_meta(meta, tokens.len()).ok()?;
        if f.size != 1 || (now - f.ts).abs() > self.max_delay {
            return None;
        }
        let mut pk: Option<&Vec<u8>> = None;
        for (tok, blob) in tokens.iter().zip(f.permits.iter()) {
            let p = self.hot.get(*blob)?.as_ref()?;
            if p.token[..] != **tok {
                return None;
            }
            pk = Some(&p.publisher_key);
        }
        let pk = pk?;
        let leaf = eg_leaf(&self.leaf_tag, event_id, profile, &f, &tokens, body);
        let (root, _, _) = climb(&leaf, f.index, f.size, f.path, None).ok()?;
        if !roots.needs_signature(pk, f.sig, &root, now) {
            return None;
        }
        Some(SigItem {
            pk: pk.clone(),
            sig: f.sig.to_vec(),
            msg: signed_root(&roots.tag, &root, f.size),
        })
    }

    /// eventguard/broker.py `_check_publish`, for a publication whose routing part's
    /// `tokens` value is `tokens_blob`.
    #[allow(clippy::too_many_arguments)]
    pub fn check<E: EgEnv>(
        &mut self,
        roots: &mut RootVerifier,
        env: &mut E,
        event_id: &str,
        profile: &str,
        tokens_blob: &[u8],
        body: &[u8],
        meta: &EgMeta<'_>,
        now: f64,
    ) -> Result<Verdict, E::Err> {
        let tokens = match parse_tokens(tokens_blob) {
            Some(t) => t,
            None => return Ok(Verdict::Drop(Reason::Malformed)),
        };
        let f = match parse_meta(meta, tokens.len()) {
            Ok(f) => f,
            Err(v) => return Ok(v),
        };
        let ts = f.ts;
        if (now - ts).abs() > self.max_delay {
            return Ok(Verdict::Drop(Reason::Stale));
        }
        let mut pk: Option<Vec<u8>> = None;
        for (tok, blob) in tokens.iter().zip(f.permits.iter()) {
            if !self.hot.contains_key(*blob) {
                let p = env.permit(blob)?;
                if self.hot.len() >= HOT_CAPACITY {
                    self.hot.clear();
                }
                self.hot.insert(blob.to_vec(), p);
            }
            let p = match &self.hot[*blob] {
                Some(p) if p.token[..] == **tok => p,
                _ => return Ok(Verdict::Drop(Reason::Unauthorised)),
            };
            let other_key = matches!(&pk, Some(k) if !k.is_empty() && p.publisher_key != *k);
            if p.subject != f.publisher || p.epoch != Some(f.epoch) || other_key {
                return Ok(Verdict::Drop(Reason::Unauthorised));
            }
            if p.issued_at > ts + self.max_delay {
                return Ok(Verdict::Drop(Reason::Stale));
            }
            if ts > p.expires_at + 0.0 {
                return Ok(Verdict::Drop(Reason::Unauthorised));
            }
            pk = Some(p.publisher_key.clone());
        }
        let pk = pk.expect("at least one token");
        if env.revoked(&pk)? {
            return Ok(Verdict::Drop(Reason::Revoked));
        }
        if !self.keys.contains(&pk) {
            env.key(&pk)?;
            if self.keys.len() >= HOT_CAPACITY {
                self.keys.clear();
            }
            self.keys.insert(pk.clone());
        }
        let leaf = eg_leaf(&self.leaf_tag, event_id, profile, &f, &tokens, body);
        match roots.verify(&pk, &leaf, f.sig, now, f.index, f.size, f.path, |msg| {
            env.verify(&pk, f.sig, msg)
        }) {
            Ok(_) => Ok(Verdict::Pass),
            Err(VerifyError::Forged) => Ok(Verdict::Drop(Reason::Forged)),
            Err(VerifyError::Sig(e)) => Err(e),
        }
    }
}

// -- default publications (default/broker.py, psguard/wire.py, psguard/record.py) ----------------

/// The signed psguard record fields of a publication's `meta` (psguard/wire.py
/// `signed_from_wire`), which the default and psguard profiles share.
#[derive(Clone, Copy, Debug)]
pub struct RecordMeta<'a> {
    pub p: Val<'a>,
    pub ts: Val<'a>,
    pub e: Val<'a>,
    pub h: Val<'a>,
    pub s: Val<'a>,
    pub sig: Val<'a>,
}

/// A record that passed `signed_from_wire`: its publisher, timestamp (ms), key epoch, the
/// signature, and the bytes signed (psguard/record.py `signed_message_packed`).
pub struct PsRecord<'a> {
    pub publisher: &'a str,
    pub ts: i64,
    pub epoch: i64,
    pub sig: &'a [u8],
    pub signed: Vec<u8>,
}

impl<'a> RecordMeta<'a> {
    pub fn all(&self) -> [Val<'a>; 6] {
        [self.p, self.ts, self.e, self.h, self.s, self.sig]
    }

    /// psguard/wire.py `signed_from_wire` for a publication whose routing part decoded to
    /// `(mode, nonce)` with tags `toks`: None is malformed. With wire types (no subclasses:
    /// those are handed back before) its slow path refuses exactly what its common shape
    /// does not take.
    pub fn record(
        &self,
        event_id: &str,
        mode: &str,
        nonce: &[u8],
        toks: Val<'a>,
        body: &[u8],
    ) -> Option<PsRecord<'a>> {
        let (
            Val::Str(publisher),
            Val::Int(ts),
            Val::Int(epoch),
            Val::Bytes(hint),
            Val::Bytes(sec),
            Val::Bytes(sig),
            Val::Bytes(toks),
        ) = (self.p, self.ts, self.e, self.h, self.s, self.sig, toks)
        else {
            return None;
        };
        if publisher.is_empty() || epoch < 0 {
            return None;
        }
        // sealed secrets are signed in their canonical form (psguard/wire.py)
        let sec: std::borrow::Cow<'_, [u8]> = if sec.is_empty() {
            std::borrow::Cow::Borrowed(sec)
        } else {
            std::borrow::Cow::Owned(canonical_secrets(sec)?)
        };
        let signed = psguard_signed(
            event_id, publisher, ts, epoch, mode, nonce, toks, hint, &sec, body,
        );
        Some(PsRecord {
            publisher,
            ts,
            epoch,
            sig,
            signed,
        })
    }
}

/// A default publication's `meta`, field by field.
#[derive(Clone, Copy, Debug)]
pub struct DfMeta<'a> {
    pub rec: RecordMeta<'a>,
    pub pm: Val<'a>,
    pub q: Val<'a>,
    pub mi: Val<'a>,
    pub mn: Val<'a>,
    pub mp: Val<'a>,
}

/// The authority publish permit's fields the guard reads (default/broker.py `AuthorityPermit`).
#[derive(Clone, Debug, Default)]
pub struct DfPermit {
    pub publish: bool,
    pub subject: String,
    pub key: Vec<u8>,
    pub epoch: Option<i64>,
    pub not_before: f64,
    pub not_after: f64,
    /// `H(permit blob)`, which the leaf commits to
    pub digest: [u8; 32],
}

/// What the default guard asks of its owner (see `EgEnv`): the verified permit behind a
/// blob, whether it is revoked now (key or certificate serial), a signature check, and the
/// replay state's check-and-accept of `(ts, seq)` (true: a replay).
pub trait DfEnv {
    type Err;
    fn permit(&mut self, blob: &[u8]) -> Result<DfPermit, Self::Err>;
    fn revoked(&mut self, blob: &[u8]) -> Result<bool, Self::Err>;
    fn verify(&mut self, blob: &[u8], sig: &[u8], message: &[u8]) -> Result<(), Self::Err>;
    fn replayed(&mut self, key: &[u8], ts: i64, seq: i64) -> Result<bool, Self::Err>;
}

const DF_LEAF_TAG: &[u8] = b"pubguard/default/leaf/v1\x00";

/// psguard/record.py `signed_message_packed`.
#[allow(clippy::too_many_arguments)]
pub fn psguard_signed(
    event_id: &str,
    publisher: &str,
    ts: i64,
    epoch: i64,
    mode: &str,
    nonce: &[u8],
    toks: &[u8],
    hint: &[u8],
    sec: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + toks.len() + hint.len() + payload.len());
    out.extend_from_slice(b"psguard-record-v1");
    for x in [event_id.as_bytes(), publisher.as_bytes()] {
        out.extend_from_slice(&(x.len() as u32).to_be_bytes());
        out.extend_from_slice(x);
    }
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&epoch.to_be_bytes());
    for x in [mode.as_bytes(), nonce, toks, hint, sec, payload] {
        out.extend_from_slice(&(x.len() as u32).to_be_bytes());
        out.extend_from_slice(x);
    }
    out
}

/// psguard/record.py `encode_secrets(decode_secrets(blob))`: the canonical form of a sealed
/// secrets blob (length-prefixed (name, ciphertext) pairs, sorted), None where
/// `decode_secrets` raises (a truncated pair, a name that is not UTF-8).
pub fn canonical_secrets(blob: &[u8]) -> Option<Vec<u8>> {
    let mut pairs: Vec<(&str, &[u8])> = Vec::new();
    let end = blob.len();
    let mut i = 0usize;
    let u32_at = |i: usize| -> Option<usize> {
        let b = blob.get(i..i.checked_add(4)?)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    while i < end {
        let n = u32_at(i)?;
        let k_end = (i + 4).checked_add(n)?;
        let k = std::str::from_utf8(blob.get(i + 4..k_end.min(end))?).ok()?;
        i = k_end;
        let m = u32_at(i)?;
        let v_end = (i + 4).checked_add(m)?;
        let v = blob.get(i + 4..v_end)?;
        i = v_end;
        pairs.push((k, v));
    }
    pairs.sort();
    let mut out = Vec::with_capacity(end);
    for (k, v) in pairs {
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(v);
    }
    Some(out)
}

/// default/broker.py `_leaf_of`.
pub fn df_leaf(signed: &[u8], seq: i64, permit_digest: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(DF_LEAF_TAG);
    h.update(b"s");
    h.update(7u32.to_be_bytes());
    h.update(b"default");
    h.update(b"b");
    h.update((signed.len() as u32).to_be_bytes());
    h.update(signed);
    h.update(b"i");
    h.update(seq.to_be_bytes());
    h.update(b"b");
    h.update(32u32.to_be_bytes());
    h.update(permit_digest);
    h.finalize().into()
}

/// The default profile's publication guard state of one broker scheme.
pub struct DfGuard {
    pub max_delay: f64,
    hot: HashMap<Vec<u8>, DfPermit>,
    /// the last permit blob checked (empty: none yet) and its entry of `hot`: a publisher's
    /// run carries one permit, compared rather than hashed for each publication
    last_blob: Vec<u8>,
    last: DfPermit,
}

impl DfGuard {
    pub fn new(max_delay: f64) -> Self {
        DfGuard {
            max_delay,
            hot: HashMap::new(),
            last_blob: Vec::new(),
            last: DfPermit::default(),
        }
    }

    /// The verified permit behind a non-empty `blob` (asked of `env` once, then kept in
    /// `hot`).
    fn permit<E: DfEnv>(&mut self, env: &mut E, blob: &[u8]) -> Result<&DfPermit, E::Err> {
        if self.last_blob.is_empty() || self.last_blob != blob {
            let p = match self.hot.get(blob) {
                Some(p) => p.clone(),
                None => {
                    let p = env.permit(blob)?;
                    if self.hot.len() >= HOT_CAPACITY {
                        self.hot.clear();
                    }
                    self.hot.insert(blob.to_vec(), p.clone());
                    p
                }
            };
            self.last = p;
            self.last_blob = blob.to_vec();
        }
        Ok(&self.last)
    }

    /// The signature `check` would verify on this publication, as `EgGuard::batch_item`
    /// (a single-signature publication whose permit was verified before). Reads only.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_item(
        &self,
        roots: &RootVerifier,
        event_id: &str,
        mode: &str,
        nonce: &[u8],
        toks: Val<'_>,
        body: &[u8],
        m: &DfMeta<'_>,
        now: f64,
    ) -> Option<SigItem> {
        if any_fallback(&m.rec.all()) || any_fallback(&[toks, m.pm, m.q, m.mi, m.mn, m.mp]) {
            return None;
        }
        let (Val::Bytes(blob), Val::Int(seq), Val::Missing | Val::Int(1)) = (m.pm, m.q, m.mn)
        else {
            return None;
        };
        let no_path = match m.mp {
            Val::Missing => true,
            Val::Bytes(b) => b.is_empty(),
            _ => false,
        };
        if !no_path || !matches!(m.mi, Val::Missing | Val::Int(0)) {
            return None;
        }
        let p = self.hot.get(blob)?;
        let rec = m.rec.record(event_id, mode, nonce, toks, body)?;
        if seq < 0 || (now - rec.ts as f64 / 1000.0).abs() > self.max_delay {
            return None;
        }
        let root = leaf_hash(&df_leaf(&rec.signed, seq, &p.digest), 0, 1); // climb of size 1
        if !roots.needs_signature(&p.key, rec.sig, &root, now) {
            return None;
        }
        Some(SigItem {
            pk: p.key.clone(),
            sig: rec.sig.to_vec(),
            msg: signed_root(&roots.tag, &root, 1),
        })
    }

    /// default/broker.py `_check_publish` for a publication whose routing part decoded to
    /// `(mode, nonce)` with tags `toks`.
    #[allow(clippy::too_many_arguments)]
    pub fn check<E: DfEnv>(
        &mut self,
        roots: &mut RootVerifier,
        env: &mut E,
        event_id: &str,
        mode: &str,
        nonce: &[u8],
        toks: Val<'_>,
        body: &[u8],
        m: &DfMeta<'_>,
        now: f64,
    ) -> Result<Verdict, E::Err> {
        if any_fallback(&m.rec.all()) || any_fallback(&[toks, m.pm, m.q, m.mi, m.mn, m.mp]) {
            return Ok(Verdict::Fallback);
        }
        let bad = Ok(Verdict::Drop(Reason::Malformed));
        let Some(rec) = m.rec.record(event_id, mode, nonce, toks, body) else {
            return bad;
        };
        let (publisher, ts, epoch, sig) = (rec.publisher, rec.ts, rec.epoch, rec.sig);
        // default/broker.py `_batch_meta`
        let blob: &[u8] = match m.pm {
            Val::Missing | Val::Null => b"",
            Val::Bytes(b) => b,
            _ => return bad,
        };
        let path: &[u8] = match m.mp {
            Val::Missing => b"",
            Val::Bytes(b) if b.len() % DIGEST == 0 && b.len() <= MAX_PATH * DIGEST => b,
            _ => return bad,
        };
        let size = match m.mn {
            Val::Missing => 1,
            Val::Int(i) => i,
            _ => return bad,
        };
        if !(1..=MAX_BATCH).contains(&size) {
            return bad;
        }
        let seq = match m.q {
            Val::Int(i) if i >= 0 => i,
            _ => return bad,
        };
        let index = match m.mi {
            Val::Missing => 0,
            Val::Int(i) if i >= 0 => i,
            _ => return bad,
        };
        if blob.is_empty() {
            return Ok(Verdict::Drop(Reason::Unauthorised));
        }
        let max_delay = self.max_delay;
        let p = self.permit(env, blob)?;
        let t = ts as f64 / 1000.0;
        if (now - t).abs() > max_delay {
            return Ok(Verdict::Drop(Reason::Stale));
        }
        if !(p.publish && p.not_before - max_delay <= t && t <= p.not_after + 0.0) {
            return Ok(Verdict::Drop(Reason::Unauthorised));
        }
        if env.revoked(blob)? {
            return Ok(Verdict::Drop(Reason::Revoked));
        }
        if p.subject != publisher || p.epoch != Some(epoch) {
            return Ok(Verdict::Drop(Reason::Unauthorised));
        }
        let leaf = df_leaf(&rec.signed, seq, &p.digest);
        let key = &p.key;
        match roots.verify(key, &leaf, sig, now, index, size, path, |msg| {
            env.verify(blob, sig, msg)
        }) {
            Ok(_) => {}
            Err(VerifyError::Forged) => return Ok(Verdict::Drop(Reason::Forged)),
            Err(VerifyError::Sig(e)) => return Err(e),
        }
        if env.replayed(key, ts, seq)? {
            return Ok(Verdict::Drop(Reason::Replayed));
        }
        Ok(Verdict::Pass)
    }
}

//! v-CAPS SRV-fast codeword matching (docs/vcaps.md "What SRV-fast leaks"; beyond
//! vcaps.txt §5, which tests each held filter against an encrypted routing vector).
//!
//! A notification carries a fresh nonce `n` and `V = {PRF(k_f, n) : f matched}`, padded with
//! random dummies. A broker tests each filter it holds: `PRF(k_f, n) ∈ V`. The PRF is AES-128
//! under `k_f` (`pubguard.crypto.AesPrf` with a 16-byte key), so this is one AES block per held
//! filter and one set lookup.
//!
//! - [`VcapsKeys`]: one broker's held keys, each AES key schedule expanded once (AES-NI when
//!   the CPU has it: the `aes` crate detects it at run time), in an order where every filter
//!   comes after the held filters covering it, with the paper's two heuristics (vcaps.txt
//!   §5.5): (i) a filter is tested only when every held filter covering it matched (a
//!   notification matching a filter matches every filter covering it), and (ii) the search
//!   stops once every recipient group is reached. Kept by the broker until its poset
//!   changes.
//! - [`VcapsCodewords`]: `V` (or a token's pred / succ codeword list) as raw fixed-width
//!   16-byte codewords, sorted, with a bucket index over their top bits. Built once per
//!   notification, as RV's `frozenset` of IDs is.
//!
//! One call per notification per broker returns the matched key indices, ascending; nothing
//! per held filter becomes a Python object. Codewords are compared in full (all 128 bits), so
//! the result equals the Python reference's `PRF(k_f, n) in V` exactly.

use aes::cipher::{generic_array::GenericArray, BlockEncrypt, KeyInit};
use aes::Aes128Enc;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

const BLOCK: usize = 16;
/// At most this many bucket bits (65,536 buckets: `MAX_LIST` codewords).
const MAX_BUCKET_BITS: u32 = 16;
/// Keys above which a call releases the GIL for the AES loop.
const RELEASE_GIL_KEYS: usize = 4096;

fn block_u128(b: &[u8]) -> u128 {
    let mut a = [0u8; BLOCK];
    a.copy_from_slice(b);
    u128::from_be_bytes(a)
}

/// A set of 16-byte codewords: sorted values and, for each value of their top `bits` bits,
/// where its run starts. Codewords are PRF outputs, so runs hold about one value; crafted
/// codewords can only lengthen a run, which is then binary-searched.
#[pyclass(module = "pubguard._native", frozen)]
pub struct VcapsCodewords {
    vals: Vec<u128>,
    starts: Vec<u32>,
    bits: u32,
}

impl VcapsCodewords {
    fn build(v: &[u8]) -> Self {
        let mut vals: Vec<u128> = v.chunks_exact(BLOCK).map(block_u128).collect();
        vals.sort_unstable();
        vals.dedup();
        let bits = vals
            .len()
            .next_power_of_two()
            .trailing_zeros()
            .min(MAX_BUCKET_BITS);
        let mut starts = vec![0u32; (1usize << bits) + 1];
        for x in &vals {
            starts[Self::bucket(*x, bits) + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        VcapsCodewords { vals, starts, bits }
    }

    #[inline]
    fn bucket(x: u128, bits: u32) -> usize {
        if bits == 0 {
            0
        } else {
            (x >> (128 - bits)) as usize
        }
    }

    #[inline]
    fn contains(&self, x: u128) -> bool {
        let b = Self::bucket(x, self.bits);
        let run = &self.vals[self.starts[b] as usize..self.starts[b + 1] as usize];
        if run.len() <= 4 {
            run.contains(&x)
        } else {
            run.binary_search(&x).is_ok()
        }
    }
}

#[pymethods]
impl VcapsCodewords {
    /// `v`: the codewords concatenated (a whole number of 16-byte blocks).
    #[new]
    fn new(v: &[u8]) -> PyResult<Self> {
        if !v.len().is_multiple_of(BLOCK) {
            return Err(PyValueError::new_err(
                "codewords are not whole 16-byte blocks",
            ));
        }
        Ok(Self::build(v))
    }

    fn __len__(&self) -> usize {
        self.vals.len()
    }

    fn __contains__(&self, codeword: &[u8]) -> bool {
        codeword.len() == BLOCK && self.contains(block_u128(codeword))
    }

    fn __repr__(&self) -> String {
        format!("VcapsCodewords(len={})", self.vals.len())
    }
}

/// Per key, a list of small ints (flat: key `i`'s are `vals[offs[i]..offs[i + 1]]`).
struct Lists {
    vals: Vec<u32>,
    offs: Vec<usize>,
}

impl Lists {
    fn new(lists: Vec<Vec<u32>>) -> Self {
        let mut vals = Vec::new();
        let mut offs = Vec::with_capacity(lists.len() + 1);
        offs.push(0);
        for l in lists {
            vals.extend(l);
            offs.push(vals.len());
        }
        Lists { vals, offs }
    }

    #[inline]
    fn of(&self, i: usize) -> &[u32] {
        &self.vals[self.offs[i]..self.offs[i + 1]]
    }
}

/// A broker's held SRV-fast keys `k_f` (16 bytes each), scheduled once, with the optional
/// heuristics' data. Immutable; not picklable; the repr shows only the size.
#[pyclass(module = "pubguard._native", frozen)]
pub struct VcapsKeys {
    /// the raw keys: scheduled when tested (16 bytes read per test, not a 704-byte schedule:
    /// a broker's held keys then fit the caches, and AES-NI's key expansion costs less than
    /// the cache misses of stored schedules)
    keys: Vec<aes::Block>,
    /// heuristic (i): each key's covering keys (earlier indices)
    covers: Option<Lists>,
    /// heuristic (ii): each key's recipient groups (`< n_groups`)
    groups: Option<(Lists, usize)>,
}

impl VcapsKeys {
    /// `PRF(k_i, nonce)` for every key `i`, handed to `each(i, codeword)` in key order
    /// (independent keys: consecutive blocks overlap in the AES pipeline).
    fn each_codeword(&self, nonce: &aes::Block, mut each: impl FnMut(usize, u128)) {
        for (i, key) in self.keys.iter().enumerate() {
            let mut blk = *nonce;
            Aes128Enc::new(key).encrypt_block(&mut blk);
            each(i, block_u128(&blk));
        }
    }

    /// The matched keys in order, with heuristics (i) and (ii) when configured.
    fn hits_in(&self, nonce: &aes::Block, v: &VcapsCodewords) -> Vec<u32> {
        let mut out = Vec::new();
        if v.vals.is_empty() || self.keys.is_empty() {
            return out;
        }
        if self.covers.is_none() && self.groups.is_none() {
            self.each_codeword(nonce, |i, x| {
                if v.contains(x) {
                    out.push(i as u32);
                }
            });
            return out;
        }
        let mut matched = vec![false; self.keys.len()];
        let (mut reached, mut left) = match &self.groups {
            Some((_, n)) => (vec![false; *n], *n),
            None => (Vec::new(), usize::MAX),
        };
        for (i, key) in self.keys.iter().enumerate() {
            if let Some(c) = &self.covers {
                if c.of(i).iter().any(|&j| !matched[j as usize]) {
                    continue; // (i): a held cover did not match
                }
            }
            let mut blk = *nonce;
            Aes128Enc::new(key).encrypt_block(&mut blk);
            if !v.contains(block_u128(&blk)) {
                continue;
            }
            matched[i] = true;
            out.push(i as u32);
            if let Some((g, _)) = &self.groups {
                for &x in g.of(i) {
                    if !reached[x as usize] {
                        reached[x as usize] = true;
                        left -= 1;
                    }
                }
                if left == 0 {
                    break; // (ii): every recipient group is reached
                }
            }
        }
        out
    }
}

fn nonce_block(nonce: &[u8]) -> PyResult<aes::Block> {
    if nonce.len() != BLOCK {
        return Err(PyValueError::new_err("the nonce must be 16 bytes"));
    }
    Ok(*GenericArray::from_slice(nonce))
}

#[pymethods]
impl VcapsKeys {
    /// `keys`: the held keys concatenated, 16 bytes each, in the broker's order.
    /// `covers[i]`: the indices (all below `i`) of held filters covering filter `i`
    /// (heuristic (i)); `groups[i]`: its recipients' groups, each below `n_groups`
    /// (heuristic (ii); None when some recipient has no group).
    #[new]
    #[pyo3(signature = (keys, covers=None, groups=None, n_groups=0))]
    fn new(
        keys: &[u8],
        covers: Option<Vec<Vec<u32>>>,
        groups: Option<Vec<Vec<u32>>>,
        n_groups: usize,
    ) -> PyResult<Self> {
        if !keys.len().is_multiple_of(BLOCK) {
            return Err(PyValueError::new_err("keys are not whole 16-byte blocks"));
        }
        let n = keys.len() / BLOCK;
        if let Some(c) = &covers {
            let bad = c
                .iter()
                .enumerate()
                .any(|(i, l)| l.iter().any(|&j| j as usize >= i));
            if c.len() != n || bad {
                return Err(PyValueError::new_err(
                    "covers must name earlier keys, one list per key",
                ));
            }
        }
        if let Some(g) = &groups {
            if g.len() != n || g.iter().flatten().any(|&x| x as usize >= n_groups) {
                return Err(PyValueError::new_err(
                    "groups must be below n_groups, one list per key",
                ));
            }
        }
        Ok(Self {
            keys: keys
                .chunks_exact(BLOCK)
                .map(|k| *GenericArray::from_slice(k))
                .collect(),
            covers: covers.map(Lists::new),
            groups: groups.map(|g| (Lists::new(g), n_groups)),
        })
    }

    fn __len__(&self) -> usize {
        self.keys.len()
    }

    fn __repr__(&self) -> String {
        format!("VcapsKeys(keys={})", self.keys.len())
    }

    /// The indices `i` (ascending) with `PRF(k_i, nonce) ∈ v`: the held filters a
    /// notification `<nonce, V>` matches (with the heuristics when configured: then only
    /// those found before the search stopped).
    fn hits(&self, py: Python<'_>, nonce: &[u8], v: &VcapsCodewords) -> PyResult<Vec<u32>> {
        let n = nonce_block(nonce)?;
        if self.keys.len() > RELEASE_GIL_KEYS {
            Ok(py.allow_threads(|| self.hits_in(&n, v)))
        } else {
            Ok(self.hits_in(&n, v))
        }
    }

    /// Stage II: the indices with `PRF(k_i, nonce)` in `pred`, and those with it in `succ`
    /// (one AES block per key for both lists of a new token; no heuristics).
    fn hits2(
        &self,
        py: Python<'_>,
        nonce: &[u8],
        pred: &VcapsCodewords,
        succ: &VcapsCodewords,
    ) -> PyResult<(Vec<u32>, Vec<u32>)> {
        let n = nonce_block(nonce)?;
        let run = || {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            if pred.vals.is_empty() && succ.vals.is_empty() {
                return (a, b);
            }
            self.each_codeword(&n, |i, x| {
                if pred.contains(x) {
                    a.push(i as u32);
                } else if succ.contains(x) {
                    b.push(i as u32);
                }
            });
            (a, b)
        };
        if self.keys.len() > RELEASE_GIL_KEYS {
            Ok(py.allow_threads(run))
        } else {
            Ok(run())
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<VcapsCodewords>()?;
    m.add_class::<VcapsKeys>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codewords_find_exactly_their_members() {
        let v: Vec<u8> = (0u8..40).flat_map(|i| [i.wrapping_mul(37); 16]).collect();
        let cw = VcapsCodewords::build(&v);
        for c in v.chunks_exact(16) {
            assert!(cw.contains(block_u128(c)));
        }
        assert!(!cw.contains(1));
        let empty = VcapsCodewords::build(&[]);
        assert!(!empty.contains(0));
    }
}

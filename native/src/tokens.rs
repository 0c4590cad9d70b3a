//! Randomized-token matching (psguard.txt §4.1 "Tokenization"): a broker holds subscription
//! tokens `T`; an event carries `<r, F_T(r)>` for its own tokens, with `F` = AES keyed by the
//! token (the twin of `pubguard.crypto.AesPrf` / `prf_aes_blocks`). One call evaluates every
//! token over every nonce of a micro-batch and compares the first 64 bits of each output with
//! the event's tags (`tok64`), as `pubguard.schemes.psguard.tokens.match_randomized` does.
//!
//! AES runs with AES-NI when the CPU has it (the `aes` crate detects it at run time) and
//! encrypts a token's whole batch of nonces in one pipelined call. The GIL is released for
//! the computation.

use aes::cipher::{generic_array::GenericArray, BlockEncrypt, KeyInit};
use aes::{Aes128, Aes256};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use sha2::{Digest, Sha256};

const BLOCK: usize = 16;
/// Tags per event above which an event's tags are sorted and binary-searched.
const LINEAR_TAGS_MAX: usize = 8;

enum Prf {
    A128(Aes128),
    A256(Aes256),
}

impl Prf {
    /// `pubguard.crypto.primitives._prf_key`: 16- and 32-byte keys as they are, any other
    /// length through `H(k)[:16]`.
    fn new(key: &[u8]) -> Self {
        match key.len() {
            16 => Prf::A128(Aes128::new(GenericArray::from_slice(key))),
            32 => Prf::A256(Aes256::new(GenericArray::from_slice(key))),
            _ => {
                let h = Sha256::digest(key);
                Prf::A128(Aes128::new(GenericArray::from_slice(&h[..16])))
            }
        }
    }

    fn encrypt(&self, blocks: &mut [aes::Block]) {
        match self {
            Prf::A128(c) => c.encrypt_blocks(blocks),
            Prf::A256(c) => c.encrypt_blocks(blocks),
        }
    }

    /// `out[i] = F(inp[i])`: the same pipelined encryption, reading the nonces where they
    /// are (no copy per token). `inp` and `out` have the same length (the caller's buffers).
    fn encrypt_into(&self, inp: &[aes::Block], out: &mut [aes::Block]) {
        let done = match self {
            Prf::A128(c) => c.encrypt_blocks_b2b(inp, out),
            Prf::A256(c) => c.encrypt_blocks_b2b(inp, out),
        };
        if done.is_err() {
            // lengths differ (never, by construction): encrypt what fits in place
            let n = inp.len().min(out.len());
            out[..n].copy_from_slice(&inp[..n]);
            self.encrypt(&mut out[..n]);
        }
    }
}

/// Every event's tags, flat (event `e`'s are `vals[offs[e]..offs[e + 1]]`), each event's
/// sorted when it has more than `LINEAR_TAGS_MAX` (then binary-searched).
struct Tags {
    vals: Vec<i64>,
    offs: Vec<usize>,
}

impl Tags {
    /// The tags of the first `n` events of `tags` (a sequence of sequences of int): tuples and
    /// lists are read in place, anything else through PyO3's sequence extraction.
    fn extract(tags: &Bound<'_, PyAny>, n: usize) -> PyResult<Self> {
        let mut vals = Vec::with_capacity(n * 8);
        let mut offs = Vec::with_capacity(n + 1);
        offs.push(0);
        for ev in tags.try_iter()?.take(n) {
            let ev = ev?;
            let start = vals.len();
            if let Ok(t) = ev.downcast_exact::<PyTuple>() {
                for x in t.iter() {
                    vals.push(x.extract::<i64>()?);
                }
            } else if let Ok(l) = ev.downcast_exact::<PyList>() {
                for x in l.iter() {
                    vals.push(x.extract::<i64>()?);
                }
            } else {
                vals.extend(ev.extract::<Vec<i64>>()?);
            }
            if vals.len() - start > LINEAR_TAGS_MAX {
                vals[start..].sort_unstable();
            }
            offs.push(vals.len());
        }
        if offs.len() <= n {
            return Err(PyValueError::new_err("fewer tag lists than nonces"));
        }
        Ok(Tags { vals, offs })
    }

    #[inline]
    fn contains(&self, e: usize, x: i64) -> bool {
        let t = &self.vals[self.offs[e]..self.offs[e + 1]];
        if t.len() > LINEAR_TAGS_MAX {
            t.binary_search(&x).is_ok()
        } else {
            t.contains(&x)
        }
    }
}

/// A bitmap over the low bits of every tag in the batch: an output whose bit is clear is no
/// event's tag, so most (token, event) pairs cost one L1 load. Tags are PRF outputs, so the
/// bits are uniform; crafted tags can only make more pairs reach the exact comparison.
struct TagFilter {
    words: Vec<u64>,
    mask: u64,
}

impl TagFilter {
    fn new(tags: &Tags) -> Self {
        let bits = (tags.vals.len() * 32)
            .next_power_of_two()
            .clamp(1 << 10, 1 << 20);
        let mut words = vec![0u64; bits / 64];
        let mask = bits as u64 - 1;
        for x in &tags.vals {
            let b = *x as u64 & mask;
            words[(b >> 6) as usize] |= 1 << (b & 63);
        }
        TagFilter { words, mask }
    }

    #[inline]
    fn maybe(&self, x: i64) -> bool {
        let b = x as u64 & self.mask;
        self.words[(b >> 6) as usize] & (1 << (b & 63)) != 0
    }
}

/// The hits `(event index, token index)`, by token then event. Each token encrypts the
/// batch's nonces (the template) into one output buffer, so a batch allocates only its
/// template, its buffer and its hits.
fn match_all(prfs: &[Prf], nonces: &[u8], tags: &Tags) -> Vec<(usize, usize)> {
    let filter = TagFilter::new(tags);
    let template: Vec<aes::Block> = nonces
        .chunks_exact(BLOCK)
        .map(|c| *GenericArray::from_slice(c))
        .collect();
    let mut buf = template.clone();
    let mut out = Vec::new();
    for (t, prf) in prfs.iter().enumerate() {
        prf.encrypt_into(&template, &mut buf);
        for (e, blk) in buf.iter().enumerate() {
            let mut first = [0u8; 8];
            first.copy_from_slice(&blk[..8]);
            let x = i64::from_be_bytes(first);
            if filter.maybe(x) && tags.contains(e, x) {
                out.push((e, t));
            }
        }
    }
    out
}

/// A broker's subscription tokens with their AES key schedules expanded once (the native
/// `[AesPrf(t) for t in tokens]`). Immutable; not picklable; the repr shows only the size.
#[pyclass(module = "pubguard._native", frozen)]
pub struct TokenSet {
    prfs: Vec<Prf>,
}

#[pymethods]
impl TokenSet {
    #[new]
    fn new(tokens: Vec<Vec<u8>>) -> Self {
        Self {
            prfs: tokens.iter().map(|t| Prf::new(t)).collect(),
        }
    }

    fn __len__(&self) -> usize {
        self.prfs.len()
    }

    fn __repr__(&self) -> String {
        format!("TokenSet(tokens={})", self.prfs.len())
    }

    /// `match_randomized(nonces, tags, tokens)` over this set: `[(event, token)]`, by token
    /// then event. `nonces` is the batch's 16-byte nonces concatenated, `tags[i]` event `i`'s
    /// `tok64` values.
    fn match_batch(
        &self,
        py: Python<'_>,
        nonces: &[u8],
        tags: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(usize, usize)>> {
        if !nonces.len().is_multiple_of(BLOCK) {
            return Err(PyValueError::new_err("nonces are not whole 16-byte blocks"));
        }
        let tags = Tags::extract(tags, nonces.len() / BLOCK)?;
        let nonces = nonces.to_vec();
        Ok(py.allow_threads(|| match_all(&self.prfs, &nonces, &tags)))
    }
}

/// `F_k` over each 16-byte block of `blocks` (the native `prf_aes_blocks`).
#[pyfunction]
fn prf_blocks<'py>(
    py: Python<'py>,
    key: &[u8],
    blocks: &[u8],
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    if !blocks.len().is_multiple_of(BLOCK) {
        return Err(PyValueError::new_err(
            "PRF input is not whole 16-byte blocks",
        ));
    }
    let prf = Prf::new(key);
    let mut buf: Vec<aes::Block> = blocks
        .chunks_exact(BLOCK)
        .map(|c| *GenericArray::from_slice(c))
        .collect();
    prf.encrypt(&mut buf);
    let mut flat = Vec::with_capacity(blocks.len());
    for b in &buf {
        flat.extend_from_slice(b);
    }
    Ok(pyo3::types::PyBytes::new(py, &flat))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TokenSet>()?;
    m.add_function(wrap_pyfunction!(prf_blocks, m)?)?;
    Ok(())
}

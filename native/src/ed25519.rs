//! Ed25519 batch verification (RFC 8032 §5.1.7 applied to many signatures at once, with
//! `ed25519-dalek`'s random linear combination), the native half of
//! `pubguard.crypto.ed25519_batch.verify_batch`.
//!
//! The verdict must be the one pyca/cryptography (OpenSSL) gives for each signature. OpenSSL
//! verifies cofactorless and byte-exact: `s < L`, then `encode([s]B - [k]A) == R` with
//! `k = SHA-512(R || A || M)` over the bytes as given. `ed25519-dalek`'s batch equation is
//! `[-sum z_i s_i]B + sum [z_i]R_i + sum [z_i k_i]A_i == 0` with 128-bit `z_i`, which accepts
//! more in three cases, so a signature takes the batch path only when none applies:
//!
//! * **non-canonical `R` or `A` encodings** (`y >= p`, or `x = 0` with the sign bit set): the
//!   batch decompresses them to the canonical point, OpenSSL compares bytes (for `R`) or
//!   rejects the key. Checked on the bytes.
//! * **points with a torsion component** (`R` or `A` outside the prime-order subgroup): the
//!   batch's `z_i` can cancel a small-order difference (`z_i = 0 mod 8`, or two differences
//!   summing to zero), while OpenSSL's single equation cannot. For `A` this is checked by
//!   `[L]A == 0` (`is_torsion_free`), once per key (remembered across calls, bounded). For `R`
//!   the same check costs more than the batch saves (about 2 verifications), so it is not
//!   made: a signature whose `R` is a valid commitment plus a small-order point, which only
//!   the holder of the signing key can make, is rejected by OpenSSL and accepted by the
//!   batch unless the `z_i` happen to expose it. This is the one known disagreement; a forger
//!   without the key cannot reach it (`docs/signatures.md`).
//! * `s >= L` is rejected by both (`ed25519-dalek` without `legacy_compatibility`).
//!
//! (`verify_strict` is stricter than OpenSSL in the other direction: it rejects small-order
//! `A` and `R` that OpenSSL accepts, so it is not used; the per-signature fallback is pyca
//! itself, in Python.) The result per signature is `True` (verified in the batch) or `False`
//! (not decided here: the caller checks it alone with pyca). No input panics.

use curve25519_dalek::edwards::CompressedEdwardsY;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::Mutex;

/// `2^255 - 19`, little-endian.
const P_LE: [u8; 32] = {
    let mut p = [0xffu8; 32];
    p[0] = 0xed;
    p[31] = 0x7f;
    p
};

/// Whether a 32-byte point encoding is the canonical one (RFC 8032 §5.1.2): `y < p`, and no
/// sign bit on the two points with `x = 0` (`y = 1` and `y = p - 1`).
fn canonical_encoding(b: &[u8; 32]) -> bool {
    let mut y = *b;
    y[31] &= 0x7f;
    let sign = b[31] >> 7 == 1;
    // y < p, compared as little-endian integers from the top byte down
    let lt_p = y
        .iter()
        .rev()
        .zip(P_LE.iter().rev())
        .find(|(a, p)| a != p)
        .is_some_and(|(a, p)| a < p);
    if !lt_p {
        return false;
    }
    let mut one = [0u8; 32];
    one[0] = 1;
    let mut p_minus_1 = P_LE;
    p_minus_1[0] -= 1;
    !(sign && (y == one || y == p_minus_1))
}

/// A canonical, decompressible point in the prime-order subgroup (see the module notes).
fn prime_order_point(b: &[u8; 32]) -> bool {
    canonical_encoding(b)
        && CompressedEdwardsY(*b)
            .decompress()
            .is_some_and(|p| p.is_torsion_free())
}

/// Keys already checked by `prime_order_point` (a cache: cleared when full).
static CHECKED_KEYS: Mutex<Option<HashMap<[u8; 32], bool>>> = Mutex::new(None);
/// Bound on `CHECKED_KEYS` (publishers' keys: a broker sees few).
const CHECKED_KEYS_MAX: usize = 4096;

/// The key as a `VerifyingKey` when it may take the batch path (canonical, prime order).
fn batch_key(pk: &[u8; 32]) -> Option<VerifyingKey> {
    let known = CHECKED_KEYS
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(pk).copied()));
    let ok = known.unwrap_or_else(|| {
        let ok = prime_order_point(pk);
        if let Ok(mut m) = CHECKED_KEYS.lock() {
            let m = m.get_or_insert_with(HashMap::new);
            if m.len() >= CHECKED_KEYS_MAX {
                m.clear();
            }
            m.insert(*pk, ok);
        }
        ok
    });
    if ok {
        VerifyingKey::from_bytes(pk).ok()
    } else {
        None
    }
}

/// Per signature, `True` when it is verified as part of the batch, `False` when it must be
/// checked alone (see the module notes). `pks[i]` (32 bytes), `sigs[i]` (64 bytes) and
/// `msgs[i]` belong together.
#[pyfunction]
fn ed25519_verify_batch(
    py: Python<'_>,
    pks: Vec<Vec<u8>>,
    sigs: Vec<Vec<u8>>,
    msgs: Vec<Vec<u8>>,
) -> PyResult<Vec<bool>> {
    if pks.len() != sigs.len() || sigs.len() != msgs.len() {
        return Err(PyValueError::new_err(
            "verify_batch needs one key and one message per signature",
        ));
    }
    Ok(py.allow_threads(|| batch(&pks, &sigs, &msgs)))
}

/// The batch itself, for Rust callers (the guard): per signature, `true` when verified in the
/// batch, `false` when it must be checked alone (with pyca, for OpenSSL's verdict).
pub fn batch(pks: &[Vec<u8>], sigs: &[Vec<u8>], msgs: &[Vec<u8>]) -> Vec<bool> {
    let mut keys_seen: HashMap<[u8; 32], Option<VerifyingKey>> = HashMap::new();
    let mut idx = Vec::with_capacity(sigs.len());
    let mut keys = Vec::with_capacity(sigs.len());
    let mut sv = Vec::with_capacity(sigs.len());
    let mut mv: Vec<&[u8]> = Vec::with_capacity(sigs.len());
    for (i, ((pk, sig), msg)) in pks.iter().zip(sigs).zip(msgs).enumerate() {
        let (Ok(pk), Ok(sig)) = (
            <[u8; 32]>::try_from(pk.as_slice()),
            <[u8; 64]>::try_from(sig.as_slice()),
        ) else {
            continue;
        };
        let key = *keys_seen.entry(pk).or_insert_with(|| batch_key(&pk));
        let Some(key) = key else { continue };
        let mut r = [0u8; 32];
        r.copy_from_slice(&sig[..32]);
        if !canonical_encoding(&r) {
            continue;
        }
        idx.push(i);
        keys.push(key);
        sv.push(Signature::from_bytes(&sig));
        mv.push(msg);
    }
    let mut out = vec![false; sigs.len()];
    if !idx.is_empty() && ed25519_dalek::verify_batch(&mv, &sv, &keys).is_ok() {
        for i in idx {
            out[i] = true;
        }
    }
    out
}

/// One signature checked natively, for Rust callers (the guards' signatures that no batch
/// covered: a Merkle root, a run's lone signature): `true` when OpenSSL would accept it too,
/// `false` when it must be checked alone with pyca (rejected, or not decided here).
///
/// A single signature has none of the batch's three cases (module notes): `ed25519-dalek`'s
/// `verify` is OpenSSL's equation, cofactorless and byte-exact (`s < L`, then
/// `encode([s]B - [k]A) == R` with `k = SHA-512(R || A || M)` over the bytes as given), and
/// torsion in `R` or `A` changes neither side's verdict. What is left is how a point is
/// decoded, so only canonical encodings of `R` and `A` are decided here: a non-canonical one
/// goes to pyca, which gives OpenSSL's verdict on it.
pub fn single(pk: &[u8], sig: &[u8], msg: &[u8]) -> bool {
    let (Ok(pk), Ok(sig)) = (<[u8; 32]>::try_from(pk), <[u8; 64]>::try_from(sig)) else {
        return false;
    };
    let mut r = [0u8; 32];
    r.copy_from_slice(&sig[..32]);
    if !canonical_encoding(&pk) || !canonical_encoding(&r) {
        return false;
    }
    let Ok(key) = VerifyingKey::from_bytes(&pk) else {
        return false;
    };
    key.verify(msg, &Signature::from_bytes(&sig)).is_ok()
}

/// `single` for Python (the differential tests against pyca).
#[pyfunction]
fn ed25519_verify_single(py: Python<'_>, pk: &[u8], sig: &[u8], msg: &[u8]) -> bool {
    py.allow_threads(|| single(pk, sig, msg))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ed25519_verify_single, m)?)?;
    m.add_function(wrap_pyfunction!(ed25519_verify_batch, m)?)
}

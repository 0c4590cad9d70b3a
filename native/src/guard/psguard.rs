//! PSGuard's publication guard (psguard/broker.py `PSGuardBroker.broker_check`, profile
//! `psguard`), pure: the publisher's signature on the record (psguard.txt §3.3 records,
//! signed with Ed25519 here) or on its Merkle batch's root, through the scheme's
//! `SignedRootVerifier` (eventguard.txt §4.4 amortised), then the timestamp window. No PyO3
//! here (its glue is `psguard_py.rs`), so the fuzz driver (native/fuzz/) runs it on its own;
//! the Python method stays the spec (tests/schemes/psguard/test_psguard_native.py compares
//! the two on generated and mutated frames).

use super::core::{
    any_fallback, Reason, RecordMeta, RootVerifier, Val, Verdict, VerifyError, DIGEST, MAX_BATCH,
    MAX_PATH,
};
use sha2::{Digest, Sha256};

/// A psguard publication's `meta`, field by field (`Missing` where absent).
#[derive(Clone, Copy, Debug)]
pub struct PsMeta<'a> {
    pub rec: RecordMeta<'a>,
    pub mi: Val<'a>,
    pub mn: Val<'a>,
    pub mp: Val<'a>,
}

/// What the guard asks of its owner: the named publisher's key (None: none known), whether
/// the name is revoked, one signature on a record (`valid`), a root's signature (`verify`:
/// the owner's error, `forged` tells an `InvalidToken`).
pub trait PsEnv {
    type Err;
    fn key(&mut self, publisher: &str) -> Result<Option<Vec<u8>>, Self::Err>;
    fn revoked(&mut self, publisher: &str) -> Result<bool, Self::Err>;
    fn valid(&mut self, sig: &[u8], message: &[u8]) -> Result<bool, Self::Err>;
    fn verify(&mut self, sig: &[u8], message: &[u8]) -> Result<(), Self::Err>;
    fn forged(&self, e: &Self::Err) -> bool;
}

/// psguard/broker.py `broker_check` on a publication whose routing part decoded to
/// `(mode, nonce)` with tags `toks`.
#[allow(clippy::too_many_arguments)]
pub fn check<E: PsEnv>(
    roots: &mut RootVerifier,
    env: &mut E,
    event_id: &str,
    mode: &str,
    nonce: &[u8],
    toks: Val<'_>,
    body: &[u8],
    m: &PsMeta<'_>,
    now: f64,
    max_delay_ms: i64,
) -> Result<Verdict, E::Err> {
    if any_fallback(&m.rec.all()) || any_fallback(&[toks, m.mi, m.mn, m.mp]) {
        return Ok(Verdict::Fallback);
    }
    let bad = Ok(Verdict::Drop(Reason::Malformed));
    let Some(rec) = m.rec.record(event_id, mode, nonce, toks, body) else {
        return bad;
    };
    let (ts, sig) = (rec.ts, rec.sig);
    let key = env.key(rec.publisher)?;
    if env.revoked(rec.publisher)? {
        return Ok(Verdict::Drop(Reason::Revoked));
    }
    if matches!(m.mn, Val::Missing) {
        // one signature per record (check_record: forged, then stale)
        let Some(_) = key else {
            return Ok(Verdict::Drop(Reason::Forged));
        };
        if !env.valid(sig, &rec.signed)? {
            return Ok(Verdict::Drop(Reason::Forged));
        }
    } else {
        // psguard/broker.py `_batch_packed`
        let (Val::Int(index), Val::Int(size), Val::Bytes(path)) = (m.mi, m.mn, m.mp) else {
            return bad;
        };
        if !(0 <= index && index < size && size <= MAX_BATCH) {
            return bad;
        }
        if !path.len().is_multiple_of(DIGEST) || path.len() > MAX_PATH * DIGEST {
            return bad;
        }
        let Some(pk) = key else {
            return Ok(Verdict::Drop(Reason::Forged));
        };
        let leaf: [u8; 32] = Sha256::digest(&rec.signed).into();
        match roots.verify(&pk, &leaf, sig, now, index, size, path, |msg| {
            env.verify(sig, msg)
        }) {
            Ok(_) => {}
            Err(VerifyError::Forged) => return Ok(Verdict::Drop(Reason::Forged)),
            Err(VerifyError::Sig(e)) if env.forged(&e) => return Ok(Verdict::Drop(Reason::Forged)),
            Err(VerifyError::Sig(e)) => return Err(e),
        }
    }
    // int(now * 1000) truncates toward zero, as `as` does (saturating beyond i64)
    let late = (i128::from((now * 1000.0) as i64) - i128::from(ts)).abs();
    if late > i128::from(max_delay_ms) {
        return Ok(Verdict::Drop(Reason::Stale));
    }
    Ok(Verdict::Pass)
}

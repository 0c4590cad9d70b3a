//! Narada's publication guard (narada-secure-delivery.txt §IV-H, Fig. 3; §V-B), pure: no
//! PyO3 (its glue is `narada_py.rs`), so the fuzz driver (native/fuzz/) runs it on its own.
//! A port of `pubguard.schemes.narada.broker.NaradaBroker._check` for publications on an
//! ordinary topic, which stays the spec (tests/schemes/narada/test_narada_native.py compares
//! the two on generated and mutated frames). In the reference's order:
//!
//! - no security token -> unauthorised (§IV-H3: no token, no routing);
//! - the key version, then the token and certificate, must have their wire types (malformed);
//! - the token, checked by its owner (the KMC's signature, the certificate it names, the CRL
//!   and its duration, behind the verified-token cache of §VI: `NdEnv::verified`);
//! - its topic and rights must cover publishing on this topic (§IV-H3/4: unauthorised);
//! - timestamp and sequence are non-negative integers (malformed), the timestamp within
//!   `max_delay` of now (the NTP check of §V-B: stale);
//! - the entity's Ed25519 signature over `signed_digest` (§IV-F `S_X(M^H)`: forged);
//! - `(ts, seq)` strictly after the entity's last (§V-B: replayed; the owner's replay state).
//!
//! KMC service topics (`kmc/<32 hex>`, `reply/<32 hex>`: §IV-B footnote 1, §V-A) follow other
//! rules and are handed back (`Fallback`), as are values the port does not model (core.rs).

use super::core::{any_fallback, Reason, Val, Verdict};
use sha2::{Digest, Sha256};

/// narada/broker.py SIG_TAG
pub const SIG_TAG: &[u8] = b"pubguard/narada/msg/v1\x00";

/// A narada publication's `meta`, field by field (`Missing` where absent).
#[derive(Clone, Copy, Debug)]
pub struct NdMeta<'a> {
    pub tok: Val<'a>,
    pub cert: Val<'a>,
    pub kv: Val<'a>,
    pub ts: Val<'a>,
    pub seq: Val<'a>,
    pub sig: Val<'a>,
}

/// What the guard reads of a verified security token `A_T^X` (keys/kmc_messages.py
/// `SecurityToken`): its topic, whether its rights allow publishing, and the fingerprint of
/// the certificate it names (the entity's replay identity).
#[derive(Clone, Debug)]
pub struct NdToken {
    pub topic: String,
    pub publish: bool,
    pub fingerprint: Vec<u8>,
}

/// What the guard asks of its owner: the verified token behind `(tok, cert)` (`Ok(Err(r))`:
/// refused with `r`, as `NaradaBroker.verified` raises), the signature of that token's
/// entity on a message, and the replay state's check-and-accept of `(ts, seq)` (true: a
/// replay). `Err`: the owner's error, passed through unchanged.
pub trait NdEnv {
    type Err;
    fn verified(&mut self, tok: &[u8], cert: &[u8]) -> Result<Result<NdToken, Reason>, Self::Err>;
    fn valid(&mut self, sig: &[u8], message: &[u8]) -> Result<bool, Self::Err>;
    fn replayed(&mut self, fingerprint: &[u8], ts: i64, seq: i64) -> Result<bool, Self::Err>;
}

/// narada/broker.py `service_kind(topic) is not None`: a KMC's or a reply topic.
pub fn is_service_topic(topic: &str) -> bool {
    ["kmc/", "reply/"].iter().any(|prefix| {
        topic.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() == 32 && rest.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        })
    })
}

fn field(out: &mut Vec<u8>, t: u8, x: &[u8]) {
    out.push(t);
    out.extend_from_slice(&(x.len() as u32).to_be_bytes());
    out.extend_from_slice(x);
}

/// narada/broker.py `signed_digest` (guards.py `pack_fields`) for a publication: what the
/// entity signs, `S_X(M^H)` over the header fields, `H(M^P)` and `H(token)` (§IV-F).
#[allow(clippy::too_many_arguments)]
pub fn signed_digest(
    op: &str,
    event_id: &str,
    topic: &str,
    ts: i64,
    seq: i64,
    until: i64,
    kv: i64,
    body: &[u8],
    token: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(SIG_TAG.len() + 128 + event_id.len() + topic.len());
    out.extend_from_slice(SIG_TAG);
    for s in [op, event_id, topic] {
        field(&mut out, b's', s.as_bytes());
    }
    for i in [ts, seq, until, kv] {
        out.push(b'i');
        out.extend_from_slice(&i.to_be_bytes());
    }
    field(&mut out, b'b', &Sha256::digest(body));
    field(&mut out, b'b', &Sha256::digest(token));
    out
}

/// A non-negative integer (narada/broker.py `_int`), else None (malformed).
fn count(v: Val<'_>) -> Option<i64> {
    match v {
        Val::Int(i) if i >= 0 => Some(i),
        _ => None,
    }
}

/// narada/broker.py `_check` on a publication whose routing part decoded to `topic`.
pub fn check<E: NdEnv>(
    env: &mut E,
    event_id: &str,
    topic: Val<'_>,
    body: &[u8],
    m: &NdMeta<'_>,
    now: f64,
    max_delay: f64,
) -> Result<Verdict, E::Err> {
    if any_fallback(&[topic, m.tok, m.cert, m.kv, m.ts, m.seq, m.sig]) {
        return Ok(Verdict::Fallback);
    }
    let bad = Ok(Verdict::Drop(Reason::Malformed));
    let topic = match topic {
        Val::Str(t) if !t.is_empty() && !is_service_topic(t) => t,
        _ => return Ok(Verdict::Fallback), // the decoded topic (or a service topic): Python's
    };
    if matches!(m.tok, Val::Missing | Val::Null) {
        return Ok(Verdict::Drop(Reason::Unauthorised));
    }
    let Some(kv) = count(m.kv) else {
        return bad;
    };
    let (Val::Bytes(tok), Val::Bytes(cert)) = (m.tok, m.cert) else {
        return bad;
    };
    let token = match env.verified(tok, cert)? {
        Ok(t) => t,
        Err(r) => return Ok(Verdict::Drop(r)),
    };
    if token.topic != topic || !token.publish {
        return Ok(Verdict::Drop(Reason::Unauthorised));
    }
    let (Some(ts), Some(seq)) = (count(m.ts), count(m.seq)) else {
        return bad;
    };
    // guards.py TimestampWindow on ts / 1000.0 (a publication is always checked at the edge)
    if (now - ts as f64 / 1000.0).abs() > max_delay {
        return Ok(Verdict::Drop(Reason::Stale));
    }
    let Val::Bytes(sig) = m.sig else {
        return bad;
    };
    let digest = signed_digest("publish", event_id, topic, ts, seq, 0, kv, body, tok);
    if !env.valid(sig, &digest)? {
        return Ok(Verdict::Drop(Reason::Forged));
    }
    if env.replayed(&token.fingerprint, ts, seq)? {
        return Ok(Verdict::Drop(Reason::Replayed));
    }
    Ok(Verdict::Pass)
}

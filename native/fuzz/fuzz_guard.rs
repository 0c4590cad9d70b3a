//! A stable-toolchain fuzz driver for the publication guard's pure core
//! (`native/src/guard/core.rs`, included below as it is compiled into `pubguard._native`).
//!
//! `cargo fuzz` needs nightly and libFuzzer; this driver needs neither. A seeded generator
//! builds well-formed EventGuard publications in signed Merkle batches (with a stand-in
//! signature, `SHA-256("sig" || pk || message)`: the fuzz target is the parsing, the Merkle
//! climb and the caches, not Ed25519), then mutates them: bit flips, truncation, extension,
//! spliced bytes, fields swapped for values of every wire type, indices and sizes at and past
//! their limits, and replays through one guard so the caches of verified roots, inner nodes
//! and permits are exercised across inputs. Raw random bytes also go to each parser alone.
//!
//! PSGuard's guard (`guard/psguard.rs`: records signed one by one and in Merkle batches) and
//! narada's (`guard/narada.rs`: token, window, signature, replay) get the same treatment with
//! their own generators, a fifth as many inputs each. The routing decoders (`guard/routing.rs`)
//! take the raw bytes too, checked against their rules, and so does the frame walk that finds
//! a broker's messages in their frame (`msgpack.rs`), with packed frame bodies mutated.
//!
//! Built with overflow checks and debug assertions; any panic aborts the run with the seed
//! and input number, so a crash reproduces with `fuzz-guard <n> <seed>`. Unmutated
//! publications must pass and mutated signed bytes must not: both are counted and checked.
#[allow(dead_code)]
#[path = "../src/guard/core.rs"]
mod core;
#[allow(dead_code)]
#[path = "../src/guard/psguard.rs"]
mod psguard;
#[allow(dead_code)]
#[path = "../src/guard/narada.rs"]
mod narada;
#[path = "../src/guard/routing.rs"]
mod routing;
#[path = "../src/msgpack.rs"]
mod msgpack;

use core::{AdPermit, DfEnv, DfGuard, DfMeta, DfPermit, EgEnv, EgGuard, EgMeta, Reason, RecordMeta, RootVerifier, Val, Verdict};
use narada::{NdEnv, NdMeta, NdToken};
use psguard::{PsEnv, PsMeta};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn h(parts: &[&[u8]]) -> [u8; 32] {
    let mut d = Sha256::new();
    for p in parts {
        d.update(p);
    }
    d.finalize().into()
}

fn fake_sig(pk: &[u8], msg: &[u8]) -> Vec<u8> {
    let a = h(&[b"sig", pk, msg]);
    [a, a].concat()
}

/// merkle.py `merkle_batch` (test-side builder): root and packed paths.
fn merkle(leaves: &[[u8; 32]]) -> ([u8; 32], Vec<Vec<u8>>) {
    let n = leaves.len();
    let mut level: Vec<[u8; 32]> = leaves
        .iter()
        .enumerate()
        .map(|(i, l)| h(&[b"\x00", &(i as u32).to_be_bytes(), &(n as u32).to_be_bytes(), l]))
        .collect();
    let mut paths = vec![Vec::new(); n];
    let mut pos: Vec<usize> = (0..n).collect();
    while level.len() > 1 {
        let mut nxt: Vec<[u8; 32]> =
            (0..level.len() / 2).map(|i| h(&[b"\x01", &level[2 * i], &level[2 * i + 1]])).collect();
        if level.len() % 2 == 1 {
            nxt.push(*level.last().unwrap());
        }
        for (leaf, p) in pos.iter_mut().enumerate() {
            let sib = *p ^ 1;
            if sib < level.len() {
                paths[leaf].extend_from_slice(&level[sib]);
            }
            *p /= 2;
        }
        level = nxt;
    }
    (level[0], paths)
}

const ROOT_TAG: &[u8] = b"pubguard/eventguard/root/v2\x00";
const LEAF_TAG: &[u8] = b"pubguard/eventguard/leaf/v1\x00";
const NOW: f64 = 1_700_000_000.0;

struct Env {
    permits: HashMap<Vec<u8>, AdPermit>,
    revoked: Vec<u8>,
}

#[derive(Debug, PartialEq)]
struct Refused;

impl EgEnv for Env {
    type Err = Refused;
    fn permit(&mut self, blob: &[u8]) -> Result<Option<AdPermit>, Refused> {
        match self.permits.get(blob) {
            Some(p) => Ok(Some(p.clone())),
            None if blob.first() == Some(&b'S') => Ok(None), // a permit of another kind
            None => Err(Refused),                           // forged or malformed
        }
    }
    fn revoked(&mut self, pk: &[u8]) -> Result<bool, Refused> {
        Ok(pk == self.revoked.as_slice())
    }
    fn key(&mut self, pk: &[u8]) -> Result<(), Refused> {
        if pk.len() == 32 {
            Ok(())
        } else {
            Err(Refused)
        }
    }
    fn verify(&mut self, pk: &[u8], sig: &[u8], msg: &[u8]) -> Result<(), Refused> {
        if sig == fake_sig(pk, msg).as_slice() {
            Ok(())
        } else {
            Err(Refused)
        }
    }
}

/// One publication in owned form (mutable before it is viewed as `EgMeta`).
#[derive(Clone)]
struct Pub {
    event_id: String,
    tokens: Vec<u8>,
    body: Vec<u8>,
    fields: Vec<OwnedVal>,
}

#[derive(Clone, Debug)]
enum OwnedVal {
    Missing,
    Str(String),
    Bytes(Vec<u8>),
    Int(i64),
    Float(f64),
    Other,
}

impl OwnedVal {
    fn view(&self) -> Val<'_> {
        match self {
            OwnedVal::Missing => Val::Missing,
            OwnedVal::Str(s) => Val::Str(s),
            OwnedVal::Bytes(b) => Val::Bytes(b),
            OwnedVal::Int(i) => Val::Int(*i),
            OwnedVal::Float(f) => Val::Float(*f),
            OwnedVal::Other => Val::Other,
        }
    }
}

fn pack_items(items: &[Vec<u8>]) -> Vec<u8> {
    items.iter().flat_map(|x| [(x.len() as u32).to_be_bytes().to_vec(), x.clone()].concat()).collect()
}

struct World {
    env: Env,
    tokens: Vec<Vec<u8>>,
    permit_blobs: Vec<Vec<u8>>,
    pk: Vec<u8>,
}

fn world(rng: &mut Rng) -> World {
    let pk = rng.bytes(32);
    let mut permits = HashMap::new();
    let mut tokens = Vec::new();
    let mut permit_blobs = Vec::new();
    for i in 0..4u8 {
        let token = rng.bytes(32);
        let blob = [vec![b'A', i], rng.bytes(60)].concat();
        permits.insert(
            blob.clone(),
            AdPermit {
                token: token.clone(),
                subject: "pub".into(),
                epoch: Some(3),
                publisher_key: pk.clone(),
                issued_at: NOW - 100.0,
                expires_at: NOW + 3600.0,
            },
        );
        tokens.push(token);
        permit_blobs.push(blob);
    }
    World { env: Env { permits, revoked: rng.bytes(32) }, tokens, permit_blobs, pk }
}

/// A signed batch of `n` well-formed publications.
fn batch(rng: &mut Rng, w: &World, n: usize, serial: &mut u64) -> Vec<Pub> {
    let mut pubs = Vec::new();
    let mut leaves = Vec::new();
    for _ in 0..n {
        *serial += 1;
        let k = 1 + rng.below(w.tokens.len() as u64) as usize;
        let toks: Vec<Vec<u8>> = w.tokens[..k].to_vec();
        let wrapped: Vec<Vec<u8>> = (0..k).map(|_| rng.bytes(40)).collect();
        let body = { let k = rng.below(64) as usize; rng.bytes(k) };
        let ts = NOW - rng.below(30) as f64;
        let p = Pub {
            event_id: format!("e{serial}"),
            tokens: toks.concat(),
            body,
            fields: vec![
                OwnedVal::Str("pub".into()),
                OwnedVal::Int(3),
                OwnedVal::Float(ts),
                OwnedVal::Bytes(Vec::new()), // sig, below
                OwnedVal::Missing, // mi
                OwnedVal::Missing, // mn
                OwnedVal::Missing, // mp
                OwnedVal::Bytes(pack_items(&wrapped)),
                OwnedVal::Bytes(pack_items(&w.permit_blobs[..k])),
            ],
        };
        let meta = meta_of(&p);
        let f = core::parse_meta(&meta, k).ok().expect("well-formed");
        let tv: Vec<&[u8]> = p.tokens.chunks(32).collect();
        leaves.push(core::eg_leaf(LEAF_TAG, &p.event_id, "eventguard", &f, &tv, &p.body));
        pubs.push(p);
    }
    let (root, paths) = merkle(&leaves);
    let sig = fake_sig(&w.pk, &core::signed_root(ROOT_TAG, &root, n as i64));
    for (i, p) in pubs.iter_mut().enumerate() {
        p.fields[3] = OwnedVal::Bytes(sig.clone());
        if n > 1 {
            p.fields[4] = OwnedVal::Int(i as i64);
            p.fields[5] = OwnedVal::Int(n as i64);
            p.fields[6] = OwnedVal::Bytes(paths[i].clone());
        }
    }
    pubs
}

fn leaf_of(p: &Pub) -> Option<[u8; 32]> {
    let tv: Vec<&[u8]> = p.tokens.chunks(32).collect();
    let m = meta_of(p);
    let f = core::parse_meta(&m, tv.len()).ok()?;
    Some(core::eg_leaf(LEAF_TAG, &p.event_id, "eventguard", &f, &tv, &p.body))
}

fn meta_of(p: &Pub) -> EgMeta<'_> {
    let v: Vec<Val<'_>> = p.fields.iter().map(|f| f.view()).collect();
    EgMeta { p: v[0], e: v[1], ts: v[2], sig: v[3], mi: v[4], mn: v[5], mp: v[6], wk: v[7], ad: v[8] }
}

/// A frame body of publications as the packer writes them (`{"t": "mb", "s": 1, "m": [..]}`).
fn frame_body(rng: &mut Rng) -> Vec<u8> {
    let n = 1 + rng.below(4) as u8;
    let mut b = vec![0x83, 0xa1, b't', 0xa2, b'm', b'b', 0xa1, b's', 0x01, 0xa1, b'm', 0x90 | n];
    for i in 0..n {
        // {"op": "publish", "event_id": "e<i>", "n": <int>, "meta": {"sig": bin 8 of 64}}
        b.extend_from_slice(&[0x84, 0xa2, b'o', b'p', 0xa7]);
        b.extend_from_slice(b"publish");
        b.extend_from_slice(&[0xa8]);
        b.extend_from_slice(b"event_id");
        let lo = rng.below(256) as u8;
        b.extend_from_slice(&[0xa2, b'e', b'0' + i, 0xa1, b'n', 0xcd, 0x01, lo]);
        b.extend_from_slice(&[0xa4, b'm', b'e', b't', b'a', 0x81, 0xa3, b's', b'i', b'g', 0xc4, 64]);
        let sig = rng.bytes(64);
        b.extend(sig);
    }
    b
}

/// The frame walk (`msgpack.rs`) on a body: every span it gives lies in the body, in order,
/// and an unmutated body's messages are all found.
fn fuzz_msgpack(rng: &mut Rng, raw: &[u8]) {
    let check = |body: &[u8]| {
        if let Some(spans) = msgpack::message_spans(body) {
            let mut last = 0;
            for (a, b) in spans.into_iter().flatten() {
                assert!(last <= a && a < b && b <= body.len(), "span out of order or bounds");
                last = b;
            }
        }
    };
    check(raw);
    let mut body = frame_body(rng);
    let spans = msgpack::message_spans(&body).expect("a packed frame body is walked");
    assert!(spans.iter().all(Option::is_some), "a packed publication is canonical");
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(body.len() as u64) as usize;
        match rng.below(4) {
            0 => body[i] ^= 1 << rng.below(8),
            1 => body[i] = [0xc0, 0xca, 0xcc, 0xd0, 0xd9, 0xdc, 0xde, 0xdf, 0xdd][rng.below(9) as usize],
            2 => body.truncate(i),
            _ => {
                let k = 1 + rng.below(3) as usize;
                let extra = rng.bytes(k);
                body.splice(i..i, extra).for_each(drop);
            }
        }
        if body.is_empty() {
            break;
        }
    }
    check(&body);
}

/// The routing decoders (`guard/routing.rs`) on raw bytes, against their rules stated
/// plainly: a nonce of the mode's length, whole int64 tags (at most `MAX_EVENT_TAGS`) that
/// pack back to the input; whole 32-byte EventGuard tokens, 1..=`MAX_TOPICS` of them.
fn fuzz_routing(rng: &mut Rng, raw: &[u8]) {
    use routing::{eg_token_count, token_tags, Mode, MAX_EVENT_TAGS, MAX_TOPICS, NONCE_BYTES, TOKEN_BYTES};
    let modes = ["r", "d", "x", "", "rd"];
    let mode = Mode::from_wire(modes[rng.below(5) as usize]);
    // mostly the shapes parse_routing accepts (a nonce of 16 or 0 bytes, whole tags), then
    // anything
    let cut = match rng.below(3) {
        0 => NONCE_BYTES.min(raw.len()),
        1 => 0,
        _ => rng.below(raw.len() as u64 + 1) as usize,
    };
    let (nonce, packed) = raw.split_at(cut);
    let packed = if rng.below(2) == 0 { &packed[..packed.len() / 8 * 8] } else { packed };
    // long packed tags too (past the limit), from the raw bytes repeated
    let long: Vec<u8> = if rng.below(64) == 0 {
        packed.iter().copied().cycle().take(8 * (MAX_EVENT_TAGS - 2 + rng.below(5) as usize)).collect()
    } else {
        packed.to_vec()
    };
    if let Some(m) = mode {
        let want_nonce = if m == Mode::Randomized { NONCE_BYTES } else { 0 };
        let ok = nonce.len() == want_nonce && long.len() % 8 == 0 && long.len() / 8 <= MAX_EVENT_TAGS;
        match token_tags(m, nonce, &long) {
            Some(tags) => {
                assert!(ok, "token_tags accepted a part parse_routing refuses");
                let back: Vec<u8> = tags.iter().flat_map(|t| t.to_be_bytes()).collect();
                assert_eq!(back, long, "tags do not pack back to their bytes");
            }
            None => assert!(!ok, "token_tags refused a part parse_routing accepts"),
        }
    }
    let ok = raw.len() % TOKEN_BYTES == 0 && (1..=MAX_TOPICS).contains(&(raw.len() / TOKEN_BYTES));
    assert_eq!(eg_token_count(raw).is_some(), ok, "eg_token_count disagrees with parse_tokens");
}

fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>) {
    match rng.below(7) {
        0 if !b.is_empty() => {
            let i = rng.below(b.len() as u64) as usize;
            b[i] ^= 1 << rng.below(8);
        }
        1 => b.truncate(rng.below(b.len() as u64 + 1) as usize),
        2 => {
            let extra = { let k = rng.below(80) as usize; rng.bytes(k) };
            b.extend(extra);
        }
        3 if !b.is_empty() => {
            // a length prefix pointed past the end, or at 0xffffffff
            let i = rng.below(b.len() as u64) as usize;
            let v = [0xff, 0xff, 0xff, 0xff];
            for (j, x) in v.iter().enumerate() {
                if i + j < b.len() {
                    b[i + j] = *x;
                }
            }
        }
        4 => b.clear(),
        5 => { let k = 32 * rng.below(20) as usize; *b = rng.bytes(k) },
        _ => {
            let n = b.len();
            if n > 1 {
                let (i, j) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
                b.swap(i, j);
            }
        }
    }
}

fn random_val(rng: &mut Rng) -> OwnedVal {
    match rng.below(9) {
        0 => OwnedVal::Missing,
        1 => OwnedVal::Str(String::from_utf8_lossy(&{ let k = rng.below(8) as usize; rng.bytes(k) }).into_owned()),
        2 => OwnedVal::Bytes({ let k = rng.below(600) as usize; rng.bytes(k) }),
        3 => OwnedVal::Int(rng.next() as i64),
        4 => OwnedVal::Int(rng.below(70_000) as i64 - 2),
        5 => OwnedVal::Float(f64::from_bits(rng.next())),
        6 => OwnedVal::Float([f64::NAN, f64::INFINITY, -f64::INFINITY, -0.0, NOW][rng.below(5) as usize]),
        7 => OwnedVal::Int([0, 1, 65_535, 65_536, 65_537, i64::MAX, i64::MIN][rng.below(7) as usize]),
        _ => OwnedVal::Other,
    }
}

/// Mutate one publication (one to three mutations).
fn mutate(rng: &mut Rng, p: &mut Pub) {
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        match rng.below(6) {
            0 => mutate_bytes(rng, &mut p.tokens),
            1 => mutate_bytes(rng, &mut p.body),
            2 => {
                let s = str_mutation(rng, &p.event_id);
                p.event_id = s;
            }
            3 | 4 => {
                let i = rng.below(9) as usize;
                match &mut p.fields[i] {
                    OwnedVal::Bytes(b) if rng.below(2) == 0 => mutate_bytes(rng, b),
                    OwnedVal::Int(v) if rng.below(2) == 0 => *v = v.wrapping_add(rng.below(3) as i64 - 1),
                    f => *f = random_val(rng),
                }
            }
            _ => {
                let i = rng.below(9) as usize;
                p.fields[i] = random_val(rng);
            }
        }
    }
}

/// One field mutated: its bytes, an integer nudged by one, or any wire value instead.
fn mutate_field(rng: &mut Rng, f: &mut OwnedVal) {
    match f {
        OwnedVal::Bytes(b) if rng.below(2) == 0 => mutate_bytes(rng, b),
        OwnedVal::Int(x) if rng.below(2) == 0 => *x = x.wrapping_add(rng.below(3) as i64 - 1),
        f => *f = random_val(rng),
    }
}

/// A token profile's record (event id, tags, body, meta fields) with one mutation.
fn mutated_record(
    rng: &mut Rng,
    (eid, tags, body, fields): (&str, &[u8], &[u8], &[OwnedVal]),
) -> (String, Vec<u8>, Vec<u8>, Vec<OwnedVal>) {
    let (mut eid, mut tags, mut body, mut fields) = (eid.to_string(), tags.to_vec(), body.to_vec(), fields.to_vec());
    match rng.below(5) {
        0 => mutate_bytes(rng, &mut tags),
        1 => mutate_bytes(rng, &mut body),
        2 => eid = str_mutation(rng, &eid),
        _ => {
            let i = rng.below(fields.len() as u64) as usize;
            mutate_field(rng, &mut fields[i]);
        }
    }
    (eid, tags, body, fields)
}

fn str_mutation(rng: &mut Rng, s: &str) -> String {
    let mut b = s.as_bytes().to_vec();
    mutate_bytes(rng, &mut b);
    String::from_utf8_lossy(&b).into_owned()
}


// -- the default profile ---------------------------------------------------------------------

const DF_ROOT_TAG: &[u8] = b"pubguard/default/root/v2\x00";

struct DfWorld {
    pk: Vec<u8>,
    permit: Vec<u8>,
    seen: HashMap<Vec<u8>, (i64, i64)>,
}

impl DfEnv for DfWorld {
    type Err = Refused;
    fn permit(&mut self, blob: &[u8]) -> Result<DfPermit, Refused> {
        if blob != self.permit.as_slice() {
            return Err(Refused);
        }
        Ok(DfPermit {
            publish: true,
            subject: "hospital".into(),
            key: self.pk.clone(),
            epoch: Some(1),
            not_before: NOW - 1000.0,
            not_after: NOW + 1000.0,
            digest: h(&[blob]),
        })
    }
    fn revoked(&mut self, _blob: &[u8]) -> Result<bool, Refused> {
        Ok(false)
    }
    fn verify(&mut self, _blob: &[u8], sig: &[u8], msg: &[u8]) -> Result<(), Refused> {
        if sig == fake_sig(&self.pk, msg).as_slice() {
            Ok(())
        } else {
            Err(Refused)
        }
    }
    fn replayed(&mut self, key: &[u8], ts: i64, seq: i64) -> Result<bool, Refused> {
        let last = self.seen.get(key).copied();
        if matches!(last, Some(l) if (ts, seq) <= l) {
            return Ok(true);
        }
        self.seen.insert(key.to_vec(), (ts, seq));
        Ok(false)
    }
}

/// A signed batch of default publications: (event id, tags, body, meta fields in DfMeta order).
fn df_batch(rng: &mut Rng, w: &DfWorld, n: usize, serial: &mut u64) -> Vec<(String, Vec<u8>, Vec<u8>, Vec<OwnedVal>)> {
    let mut out = Vec::new();
    let mut leaves = Vec::new();
    let pd = h(&[&w.permit]);
    for _ in 0..n {
        *serial += 1;
        let eid = format!("d{serial}");
        let tags = { let k = 8 * rng.below(6) as usize; rng.bytes(k) };
        let body = { let k = rng.below(48) as usize; rng.bytes(k) };
        let hint = rng.bytes(8);
        let sec = if rng.below(2) == 0 {
            Vec::new()
        } else {
            let mut pairs = vec![(b"b".to_vec(), rng.bytes(5)), (b"a".to_vec(), rng.bytes(3))];
            if rng.below(2) == 0 {
                pairs.reverse();
            }
            pairs.iter().flat_map(|(k, v)| [(k.len() as u32).to_be_bytes().to_vec(), k.clone(), (v.len() as u32).to_be_bytes().to_vec(), v.clone()].concat()).collect()
        };
        let ts = (NOW * 1000.0) as i64 - 1000; // (ts, seq) rises with seq: no replays
        let seq = *serial as i64;
        let canon = if sec.is_empty() { Vec::new() } else { core::canonical_secrets(&sec).expect("well-formed") };
        let signed = core::psguard_signed(&eid, "hospital", ts, 1, "randomized", &[7u8; 16], &tags, &hint, &canon, &body);
        leaves.push(core::df_leaf(&signed, seq, &pd));
        let fields = vec![
            OwnedVal::Str("hospital".into()),
            OwnedVal::Int(ts),
            OwnedVal::Int(1),
            OwnedVal::Bytes(hint),
            OwnedVal::Bytes(sec),
            OwnedVal::Missing, // sig
            OwnedVal::Bytes(w.permit.clone()),
            OwnedVal::Int(seq),
            OwnedVal::Missing,
            OwnedVal::Missing,
            OwnedVal::Missing,
        ];
        out.push((eid, tags, body, fields));
    }
    let (root, paths) = merkle(&leaves);
    let sig = fake_sig(&w.pk, &core::signed_root(DF_ROOT_TAG, &root, n as i64));
    for (i, p) in out.iter_mut().enumerate() {
        p.3[5] = OwnedVal::Bytes(sig.clone());
        if n > 1 {
            p.3[8] = OwnedVal::Int(i as i64);
            p.3[9] = OwnedVal::Int(n as i64);
            p.3[10] = OwnedVal::Bytes(paths[i].clone());
        }
    }
    out
}

fn rec_meta<'a>(v: &[Val<'a>]) -> RecordMeta<'a> {
    RecordMeta { p: v[0], ts: v[1], e: v[2], h: v[3], s: v[4], sig: v[5] }
}

fn df_meta(f: &[OwnedVal]) -> DfMeta<'_> {
    let v: Vec<Val<'_>> = f.iter().map(|x| x.view()).collect();
    DfMeta { rec: rec_meta(&v), pm: v[6], q: v[7], mi: v[8], mn: v[9], mp: v[10] }
}

/// Default publications through the default guard: `count` inputs. Returns (inputs, clean
/// publications refused, mutated ones passed).
fn fuzz_default(rng: &mut Rng, count: u64) -> (u64, u64, u64) {
    let mut w = DfWorld { pk: rng.bytes(32), permit: rng.bytes(90), seen: HashMap::new() };
    let mut guard = DfGuard::new(60.0);
    let mut roots = RootVerifier::new(DF_ROOT_TAG, 120.0, 4096, 1 << 12);
    let (mut done, mut clean_fail, mut passed, mut serial) = (0u64, 0u64, 0u64, 0u64);
    while done < count {
        let n = [1usize, 3, 16][rng.below(3) as usize];
        for (eid, tags, body, fields) in df_batch(rng, &w, n, &mut serial) {
            let m = df_meta(&fields);
            let v = guard.check(&mut roots, &mut w, &eid, "randomized", &[7u8; 16], Val::Bytes(&tags), &body, &m, NOW);
            done += 1;
            if v != Ok(Verdict::Pass) {
                clean_fail += 1;
            }
            for _ in 0..8 {
                let (eid2, tags2, body2, f2) = mutated_record(rng, (&eid, &tags, &body, &fields));
                let m = df_meta(&f2);
                // the batch pre-pass reads the same frame first (no state change)
                let _ = guard.batch_item(&roots, &eid2, "randomized", &[7u8; 16], Val::Bytes(&tags2), &body2, &m, NOW);
                let v = guard.check(&mut roots, &mut w, &eid2, "randomized", &[7u8; 16], Val::Bytes(&tags2), &body2, &m, NOW);
                done += 1;
                if v == Ok(Verdict::Pass) {
                    passed += 1; // only a mutation that changed nothing signed (a replay is refused)
                }
            }
        }
        let raw = { let k = rng.below(200) as usize; rng.bytes(k) };
        let _ = core::canonical_secrets(&raw);
        done += 1;
    }
    (done, clean_fail, passed)
}

// -- the psguard profile -----------------------------------------------------------------------

const PS_ROOT_TAG: &[u8] = b"pubguard/psguard/root/v1\x00";

struct PsWorld {
    pk: Vec<u8>,
    revoked: bool,
}

impl PsEnv for PsWorld {
    type Err = Refused;
    fn key(&mut self, publisher: &str) -> Result<Option<Vec<u8>>, Refused> {
        Ok((publisher == "hospital").then(|| self.pk.clone()))
    }
    fn revoked(&mut self, _publisher: &str) -> Result<bool, Refused> {
        Ok(self.revoked)
    }
    fn valid(&mut self, sig: &[u8], msg: &[u8]) -> Result<bool, Refused> {
        Ok(sig == fake_sig(&self.pk, msg).as_slice())
    }
    fn verify(&mut self, sig: &[u8], msg: &[u8]) -> Result<(), Refused> {
        if sig == fake_sig(&self.pk, msg).as_slice() { Ok(()) } else { Err(Refused) }
    }
    fn forged(&self, _e: &Refused) -> bool {
        true
    }
}

/// psguard records (event id, tags, body, meta fields in PsMeta order), signed one by one
/// (`n == 1`) or as a Merkle batch.
fn ps_batch(rng: &mut Rng, pk: &[u8], n: usize, serial: &mut u64) -> Vec<(String, Vec<u8>, Vec<u8>, Vec<OwnedVal>)> {
    let mut out = Vec::new();
    let mut leaves = Vec::new();
    for _ in 0..n {
        *serial += 1;
        let eid = format!("p{serial}");
        let tags = { let k = 8 * rng.below(6) as usize; rng.bytes(k) };
        let body = { let k = rng.below(48) as usize; rng.bytes(k) };
        let hint = rng.bytes(8);
        let ts = (NOW * 1000.0) as i64 - rng.below(5000) as i64;
        let signed = core::psguard_signed(&eid, "hospital", ts, 2, "randomized", &[9u8; 16], &tags, &hint, b"", &body);
        leaves.push(h(&[&signed]));
        let sig = if n == 1 { OwnedVal::Bytes(fake_sig(pk, &signed)) } else { OwnedVal::Missing };
        let fields = vec![
            OwnedVal::Str("hospital".into()),
            OwnedVal::Int(ts),
            OwnedVal::Int(2),
            OwnedVal::Bytes(hint),
            OwnedVal::Bytes(Vec::new()),
            sig,
            OwnedVal::Missing,
            OwnedVal::Missing,
            OwnedVal::Missing,
        ];
        out.push((eid, tags, body, fields));
    }
    if n > 1 {
        let (root, paths) = merkle(&leaves);
        let sig = fake_sig(pk, &core::signed_root(PS_ROOT_TAG, &root, n as i64));
        for (i, p) in out.iter_mut().enumerate() {
            p.3[5] = OwnedVal::Bytes(sig.clone());
            p.3[6] = OwnedVal::Int(i as i64);
            p.3[7] = OwnedVal::Int(n as i64);
            p.3[8] = OwnedVal::Bytes(paths[i].clone());
        }
    }
    out
}

fn ps_meta(f: &[OwnedVal]) -> PsMeta<'_> {
    let v: Vec<Val<'_>> = f.iter().map(|x| x.view()).collect();
    PsMeta { rec: rec_meta(&v), mi: v[6], mn: v[7], mp: v[8] }
}

/// psguard publications through its guard: `count` inputs. Returns (inputs, clean
/// publications refused, mutated ones passed whose signed bytes changed).
fn fuzz_psguard(rng: &mut Rng, count: u64) -> (u64, u64, u64) {
    let mut w = PsWorld { pk: rng.bytes(32), revoked: false };
    let mut roots = RootVerifier::new(PS_ROOT_TAG, 120.0, 4096, 1 << 12);
    let (mut done, mut clean_fail, mut forged, mut serial) = (0u64, 0u64, 0u64, 0u64);
    let signed_of = |eid: &str, tags: &[u8], body: &[u8], f: &[OwnedVal]| -> Option<Vec<u8>> {
        let v: Vec<Val<'_>> = f.iter().map(|x| x.view()).collect();
        rec_meta(&v).record(eid, "randomized", &[9u8; 16], Val::Bytes(tags), body).map(|r| r.signed)
    };
    while done < count {
        let n = [1usize, 1, 4, 16][rng.below(4) as usize];
        let pk = w.pk.clone();
        for (eid, tags, body, fields) in ps_batch(rng, &pk, n, &mut serial) {
            w.revoked = rng.below(64) == 0;
            let v = psguard::check(&mut roots, &mut w, &eid, "randomized", &[9u8; 16], Val::Bytes(&tags), &body, &ps_meta(&fields), NOW, 60_000);
            done += 1;
            if !w.revoked && v != Ok(Verdict::Pass) {
                clean_fail += 1;
            }
            let want = signed_of(&eid, &tags, &body, &fields);
            for _ in 0..8 {
                let (eid2, tags2, body2, f2) = mutated_record(rng, (&eid, &tags, &body, &fields));
                let now = if rng.below(16) == 0 { NOW + rng.below(200) as f64 } else { NOW };
                let v = psguard::check(&mut roots, &mut w, &eid2, "randomized", &[9u8; 16], Val::Bytes(&tags2), &body2, &ps_meta(&f2), now, 60_000);
                done += 1;
                if v == Ok(Verdict::Pass) && signed_of(&eid2, &tags2, &body2, &f2) != want {
                    forged += 1; // a pass must be the signed record itself
                }
            }
        }
    }
    (done, clean_fail, forged)
}

// -- the narada profile ------------------------------------------------------------------------

struct NdWorld {
    pk: Vec<u8>,
    tok: Vec<u8>,
    cert: Vec<u8>,
    seen: HashMap<Vec<u8>, (i64, i64)>,
}

impl NdEnv for NdWorld {
    type Err = Refused;
    fn verified(&mut self, tok: &[u8], cert: &[u8]) -> Result<Result<NdToken, Reason>, Refused> {
        if tok != self.tok.as_slice() {
            return Ok(Err(if tok.first() == Some(&b'U') { Reason::Unauthorised } else { Reason::Forged }));
        }
        if cert != self.cert.as_slice() {
            return Err(Refused); // the owner's own error, passed through
        }
        Ok(Ok(NdToken { topic: "/gis/sensors".into(), publish: true, fingerprint: h(&[cert]).to_vec() }))
    }
    fn valid(&mut self, sig: &[u8], msg: &[u8]) -> Result<bool, Refused> {
        Ok(sig == fake_sig(&self.pk, msg).as_slice())
    }
    fn replayed(&mut self, fp: &[u8], ts: i64, seq: i64) -> Result<bool, Refused> {
        if matches!(self.seen.get(fp), Some(l) if (ts, seq) <= *l) {
            return Ok(true);
        }
        self.seen.insert(fp.to_vec(), (ts, seq));
        Ok(false)
    }
}

fn nd_meta(f: &[OwnedVal]) -> NdMeta<'_> {
    let v: Vec<Val<'_>> = f.iter().map(|x| x.view()).collect();
    NdMeta { tok: v[0], cert: v[1], kv: v[2], ts: v[3], seq: v[4], sig: v[5] }
}

/// narada publications through its guard: `count` inputs. Returns (inputs, fresh
/// publications refused, mutated ones passed that changed nothing signed, and that did).
fn fuzz_narada(rng: &mut Rng, count: u64) -> (u64, u64, u64, u64) {
    let mut w = NdWorld { pk: rng.bytes(32), tok: rng.bytes(180), cert: rng.bytes(300), seen: HashMap::new() };
    let (mut done, mut clean_fail, mut passed, mut forged, mut seq) = (0u64, 0u64, 0u64, 0u64, 0i64);
    let topic = "/gis/sensors";
    while done < count {
        seq += 1;
        let eid = format!("n{seq}");
        let body = { let k = rng.below(64) as usize; rng.bytes(k) };
        let ts = (NOW * 1000.0) as i64;
        let kv = rng.below(4) as i64;
        let d = narada::signed_digest("publish", &eid, topic, ts, seq, 0, kv, &body, &w.tok);
        let fields = vec![
            OwnedVal::Bytes(w.tok.clone()),
            OwnedVal::Bytes(w.cert.clone()),
            OwnedVal::Int(kv),
            OwnedVal::Int(ts),
            OwnedVal::Int(seq),
            OwnedVal::Bytes(fake_sig(&w.pk, &d)),
        ];
        for _ in 0..8 {
            let (mut eid2, mut body2, mut f2) = (eid.clone(), body.clone(), fields.clone());
            let mut topic2 = topic.to_string();
            match rng.below(6) {
                0 => mutate_bytes(rng, &mut body2),
                1 => eid2 = str_mutation(rng, &eid2),
                2 => topic2 = [str_mutation(rng, topic), format!("kmc/{:032x}", rng.next() as u128)][rng.below(2) as usize].clone(),
                _ => {
                    let i = rng.below(6) as usize;
                    mutate_field(rng, &mut f2[i]);
                }
            }
            let now = if rng.below(16) == 0 { NOW + rng.below(200) as f64 } else { NOW };
            let v = narada::check(&mut w, &eid2, Val::Str(&topic2), &body2, &nd_meta(&f2), now, 60.0);
            done += 1;
            if v == Ok(Verdict::Pass) {
                // only a mutation that changed nothing signed passes (before the original)
                let same = match (&f2[0], &f2[2], &f2[3], &f2[4]) {
                    (OwnedVal::Bytes(t), OwnedVal::Int(k), OwnedVal::Int(s), OwnedVal::Int(q)) => {
                        narada::signed_digest("publish", &eid2, &topic2, *s, *q, 0, *k, &body2, t) == d
                    }
                    _ => false,
                };
                if same { passed += 1 } else { forged += 1 }
            }
        }
        let v = narada::check(&mut w, &eid, Val::Str(topic), &body, &nd_meta(&fields), NOW, 60.0);
        done += 1;
        if v != Ok(Verdict::Pass) && v != Ok(Verdict::Drop(Reason::Replayed)) {
            clean_fail += 1;
        }
        let _ = narada::is_service_topic(&String::from_utf8_lossy(&{ let k = rng.below(40) as usize; rng.bytes(k) }));
    }
    (done, clean_fail, passed, forged)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let total: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000_000);
    let seed: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(0x5eed_2026);
    let mut rng = Rng(seed | 1);
    let w = world(&mut rng);
    let mut env = Env { permits: w.env.permits.clone(), revoked: w.env.revoked.clone() };
    let mut guard = EgGuard::new(60.0, LEAF_TAG);
    let mut roots = RootVerifier::new(ROOT_TAG, 120.0, 4096, 1 << 12);
    let mut serial = 0u64;
    let (mut done, mut passed, mut drops) = (0u64, 0u64, HashMap::<&'static str, u64>::new());
    let mut clean_fail = 0u64;
    let mut forged_passed = 0u64;
    let world_ref = w;
    while done < total {
        let n = [1usize, 2, 3, 7, 16, 64][rng.below(6) as usize];
        let pubs = batch(&mut rng, &world_ref, n, &mut serial);
        for p in &pubs {
            // the unmutated publication passes (sometimes; its replay is left to the core)
            if rng.below(8) == 0 {
                let m = meta_of(p);
                let v = guard.check(&mut roots, &mut env, &p.event_id, "eventguard", &p.tokens, &p.body, &m, NOW);
                done += 1;
                if v != Ok(Verdict::Pass) {
                    clean_fail += 1;
                }
            }
            for _ in 0..16 {
                let mut q = p.clone();
                mutate(&mut rng, &mut q);
                let m = meta_of(&q);
                let now = if rng.below(16) == 0 { NOW + rng.below(200) as f64 } else { NOW };
                // the batch pre-pass reads the same frame first (no state change)
                let _ = guard.batch_item(&roots, &q.event_id, "eventguard", &q.tokens, &q.body, &m, now);
                let v = guard.check(&mut roots, &mut env, &q.event_id, "eventguard", &q.tokens, &q.body, &m, now);
                done += 1;
                match v {
                    Ok(Verdict::Pass) => {
                        // a pass must be the signed publication itself: its leaf unchanged
                        passed += 1;
                        if leaf_of(&q) != leaf_of(p) {
                            forged_passed += 1;
                        }
                    }
                    Ok(Verdict::Drop(r)) => *drops.entry(r.as_str()).or_default() += 1,
                    Ok(Verdict::Fallback) => *drops.entry("fallback").or_default() += 1,
                    Err(Refused) => *drops.entry("refused-by-env").or_default() += 1,
                }
            }
            // the parsers alone on raw bytes
            let raw = { let k = rng.below(700) as usize; rng.bytes(k) };
            let _ = core::unpack_items(&raw, 1 + rng.below(4) as usize);
            let _ = core::parse_tokens(&raw);
            let (i, s) = (rng.below(70_000) as i64 - 3, rng.below(70_000) as i64 - 3);
            let _ = core::climb(&raw[..raw.len().min(40)], i, s, &raw, None);
            fuzz_routing(&mut rng, &raw);
            fuzz_msgpack(&mut rng, &raw);
            done += 1;
        }
        if done % 1_000_000 < 1100 {
            eprint!(".");
        }
    }
    let _ = Reason::Malformed;
    // the default profile: a fifth as many again
    let (dn, dfail, dpassed) = fuzz_default(&mut rng, total / 5);
    done += dn;
    let (pn, pfail, pforged) = fuzz_psguard(&mut rng, total / 5);
    done += pn;
    let (nn, nfail, npassed, nforged) = fuzz_narada(&mut rng, total / 5);
    done += nn;
    eprintln!();
    println!("fuzz-guard: default profile {dn} inputs: unmutated refused {dfail}, mutated passed {dpassed}");
    println!("fuzz-guard: psguard profile {pn} inputs: unmutated refused {pfail}, passed with other signed bytes {pforged}");
    println!("fuzz-guard: narada profile {nn} inputs: fresh refused {nfail}, mutated passed {npassed} (signed bytes unchanged), with other signed bytes {nforged}");
    if dfail > 0 || dpassed > 0 || pfail > 0 || pforged > 0 || nfail > 0 || nforged > 0 {
        std::process::exit(1);
    }
    println!(
        "fuzz-guard: {done} inputs, seed {seed}: no panic; unmutated failed {clean_fail}, mutated passed {passed} (of which forged {forged_passed}), verdicts {drops:?}; roots verified {}",
        roots.verifications
    );
    if clean_fail > 0 || forged_passed > 0 {
        std::process::exit(1);
    }
}

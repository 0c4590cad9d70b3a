//! Where a frame's messages lie in its bytes, and whether each is encoded exactly as pubguard's
//! packer would encode it (pubguard/wire/framing.py `message_raws`).
//!
//! A broker passes most publications on unchanged: to the subscribers whose filters match, as
//! the `event` of a delivery, and to the other brokers. The Python reference packs the decoded
//! publication again for that (`net/server/batching.py` `pack_message`). When the bytes it
//! arrived as are already that packing, they can be spliced in instead. This module finds each
//! message's bytes in a frame body (`{"t": "m", "m": {..}}` or `{"t": "mb", "m": [{..}, ..]}`)
//! and says whether they are *canonical*: `pack(unpackb(raw)) == raw`, byte for byte, with
//! msgpack-python's packer (`use_bin_type=True`). Canonical here means:
//!
//! - every length and integer in its shortest form, as msgpack-python chooses it: a
//!   non-negative integer as a positive fixint or `uint 8/16/32/64`, a negative one as a
//!   negative fixint or `int 8/16/32/64`; a string of under 32 bytes as a fixstr and then
//!   `str 8/16/32`; `bin 8/16/32`; arrays and maps as fix forms, then 16 and 32 bits;
//! - floats as `float 64` (the packer never writes `float 32`);
//! - strings valid UTF-8; map keys strings, no key twice in one map;
//! - no extension types, nothing nested deeper than [`MAX_DEPTH`].
//!
//! A message that is not canonical gets no bytes here, and the broker packs it as before: the
//! output is the same either way (tests/wire/test_raw_messages.py checks both backends against
//! `pack`). The walk is pure Rust over a byte slice, bounds-checked at every step, and fuzzed
//! with the guard (native/fuzz/).

/// Deeper values make the walk give up (no bytes for the whole frame).
pub const MAX_DEPTH: usize = 32;

struct Reader<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.p.checked_add(n)?;
        let s = self.b.get(self.p..end)?;
        self.p = end;
        Some(s)
    }

    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.p)?;
        self.p += 1;
        Some(v)
    }

    fn be(&mut self, n: usize) -> Option<u64> {
        let s = self.take(n)?;
        Some(s.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    fn len(&mut self, n: usize) -> Option<usize> {
        usize::try_from(self.be(n)?).ok()
    }
}

/// What the next value is: its encoding's canonical flag, and for a str, its bytes.
enum Head<'a> {
    Scalar(bool),
    Str(&'a [u8], bool),
    Array(usize, bool),
    Map(usize, bool),
}

fn head<'a>(r: &mut Reader<'a>) -> Option<Head<'a>> {
    let b = r.byte()?;
    Some(match b {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 | 0xcb => {
            if b == 0xcb {
                r.take(8)?;
            }
            Head::Scalar(true)
        }
        0x80..=0x8f => Head::Map(usize::from(b & 0x0f), true),
        0x90..=0x9f => Head::Array(usize::from(b & 0x0f), true),
        0xa0..=0xbf => Head::Str(r.take(usize::from(b & 0x1f))?, true),
        0xc4..=0xc6 => {
            let w = 1usize << (b - 0xc4);
            let n = r.len(w)?;
            r.take(n)?;
            Head::Scalar(match b {
                0xc4 => true,
                0xc5 => n >= 1 << 8,
                _ => n >= 1 << 16,
            })
        }
        0xca => {
            r.take(4)?;
            Head::Scalar(false)
        }
        0xcc..=0xcf => {
            let w = 1usize << (b - 0xcc);
            let v = r.be(w)?;
            Head::Scalar(match b {
                0xcc => v >= 1 << 7,
                0xcd => v >= 1 << 8,
                0xce => v >= 1 << 16,
                _ => v >= 1 << 32,
            })
        }
        0xd0..=0xd3 => {
            let w = 1usize << (b - 0xd0);
            let raw = r.be(w)?;
            let shift = 64 - 8 * w as u32;
            // sign-extend the big-endian two's complement value
            let v = ((raw << shift) as i64) >> shift;
            Head::Scalar(match b {
                0xd0 => v < -(1 << 5),
                0xd1 => v < -(1 << 7),
                0xd2 => v < -(1 << 15),
                _ => v < -(1 << 31),
            })
        }
        0xd9..=0xdb => {
            let w = 1usize << (b - 0xd9);
            let n = r.len(w)?;
            let s = r.take(n)?;
            Head::Str(
                s,
                match b {
                    0xd9 => n >= 32,
                    0xda => n >= 1 << 8,
                    _ => n >= 1 << 16,
                },
            )
        }
        0xdc | 0xdd => {
            let n = r.len(if b == 0xdc { 2 } else { 4 })?;
            Head::Array(n, if b == 0xdc { n >= 16 } else { n >= 1 << 16 })
        }
        0xde | 0xdf => {
            let n = r.len(if b == 0xde { 2 } else { 4 })?;
            Head::Map(n, if b == 0xde { n >= 16 } else { n >= 1 << 16 })
        }
        // 0xc1 (never used) and the extension types: not a pubguard value
        _ => return None,
    })
}

/// Walk one value; `Some(canonical)`, or None when the bytes are not a value of the wire types.
fn value(r: &mut Reader<'_>, depth: usize) -> Option<bool> {
    if depth > MAX_DEPTH {
        return None;
    }
    match head(r)? {
        Head::Scalar(c) => Some(c),
        Head::Str(s, c) => Some(c && std::str::from_utf8(s).is_ok()),
        Head::Array(n, mut c) => {
            for _ in 0..n {
                c &= value(r, depth + 1)?;
            }
            Some(c)
        }
        Head::Map(n, mut c) => {
            // the keys, on the stack for the usual handful
            let mut small: [&[u8]; 16] = [&[]; 16];
            let mut large: Vec<&[u8]> = Vec::new();
            for i in 0..n {
                match head(r)? {
                    Head::Str(k, kc) => {
                        c &= kc && std::str::from_utf8(k).is_ok();
                        if n <= small.len() {
                            small[i] = k;
                        } else {
                            large.push(k);
                        }
                    }
                    other => {
                        c = false;
                        skip_rest(r, other, depth + 1)?;
                    }
                }
                c &= value(r, depth + 1)?;
            }
            Some(
                c && if n <= small.len() {
                    distinct(&mut small[..n])
                } else {
                    distinct(&mut large)
                },
            )
        }
    }
}

/// No key twice (pairwise for the usual handful, by a fingerprint of length, first and last
/// byte before the bytes themselves; sorted for a large map).
fn distinct(keys: &mut [&[u8]]) -> bool {
    if keys.len() <= 16 {
        let fp = |k: &[u8]| match k {
            [] => 0u32,
            [a, .., z] | [a @ z] => ((k.len() as u32) << 16) | (u32::from(*a) << 8) | u32::from(*z),
        };
        let mut fps = [0u32; 16];
        for (i, k) in keys.iter().enumerate() {
            let f = fp(k);
            if fps[..i]
                .iter()
                .zip(keys.iter())
                .any(|(&g, other)| g == f && other == k)
            {
                return false;
            }
            fps[i] = f;
        }
        return true;
    }
    keys.sort_unstable();
    keys.windows(2).all(|w| w[0] != w[1])
}

/// The rest of a value whose head was already read (a map key that is not a string).
fn skip_rest(r: &mut Reader<'_>, h: Head<'_>, depth: usize) -> Option<()> {
    if depth > MAX_DEPTH {
        return None;
    }
    match h {
        Head::Scalar(_) | Head::Str(..) => Some(()),
        Head::Array(n, _) => {
            for _ in 0..n {
                value(r, depth + 1)?;
            }
            Some(())
        }
        Head::Map(n, _) => {
            for _ in 0..2 * n {
                value(r, depth + 1)?;
            }
            Some(())
        }
    }
}

/// A publication's packed map starts with this entry (`"op": "publish"`).
pub const PUBLISH_OP: &[u8] = b"\xa2op\xa7publish";

/// The packed fields of a canonical publication without its `op` (what a delivery's `event`
/// and a forward carry): its map's count less one, then its entries after `"op": "publish"`
/// when that is the first (a publication has at most six fields: a fixmap). None otherwise.
pub fn publication_fields(raw: &[u8]) -> Option<(u8, &[u8])> {
    let (&count, rest) = raw.split_first()?;
    if !(0x81..=0x8f).contains(&count) {
        return None;
    }
    let entries = rest.strip_prefix(PUBLISH_OP)?;
    Some((count - 1, entries))
}

/// A message's span `(start, end)` in the body when it is a map encoded canonically.
fn message(r: &mut Reader<'_>) -> Option<Option<(usize, usize)>> {
    let start = r.p;
    let is_map = matches!(r.b.get(start), Some(0x80..=0x8f | 0xde | 0xdf));
    let canonical = value(r, 1)?;
    Some((is_map && canonical).then_some((start, r.p)))
}

/// The messages of a frame body (the msgpack map after the version byte): for `m` a map, one
/// span; for `m` an array, one per element, in order. Each is `(start, end)` when that
/// message's bytes are canonical, else None. None overall when the body is not a map with an
/// `m`, holds trailing bytes, or is not made of wire values.
pub fn message_spans(body: &[u8]) -> Option<Vec<Option<(usize, usize)>>> {
    let mut r = Reader { b: body, p: 0 };
    let n = match head(&mut r)? {
        Head::Map(n, _) => n,
        _ => return None,
    };
    let mut out: Option<Vec<Option<(usize, usize)>>> = None;
    for _ in 0..n {
        let is_m = match head(&mut r)? {
            Head::Str(k, _) => k == b"m",
            other => {
                skip_rest(&mut r, other, 1)?;
                false
            }
        };
        if !is_m {
            value(&mut r, 1)?;
            continue;
        }
        let mut spans = Vec::new();
        match r.b.get(r.p) {
            Some(0x90..=0x9f | 0xdc | 0xdd) => {
                let k = match head(&mut r)? {
                    Head::Array(k, _) => k,
                    _ => return None,
                };
                spans.reserve(k.min(4096));
                for _ in 0..k {
                    spans.push(message(&mut r)?);
                }
            }
            _ => spans.push(message(&mut r)?),
        }
        out = Some(spans); // a repeated "m": the decoder keeps the last, and so does this
    }
    if r.p != body.len() {
        return None;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_batch() {
        // {"t": "m", "s": 1, "m": {"a": 1}}
        let single = b"\x83\xa1t\xa1m\xa1s\x01\xa1m\x81\xa1a\x01";
        assert_eq!(message_spans(single), Some(vec![Some((10, 14))]));
        // {"t": "mb", "s": 1, "m": [{"a": 1}, {"a": 0xcc 0x01 (not canonical)}]}
        let batch = b"\x83\xa1t\xa2mb\xa1s\x01\xa1m\x92\x81\xa1a\x01\x81\xa1a\xcc\x01";
        assert_eq!(message_spans(batch), Some(vec![Some((12, 16)), None]));
    }

    #[test]
    fn duplicate_keys_and_trailing_bytes() {
        let dup = b"\x81\xa1m\x82\xa1a\x01\xa1a\x02";
        assert_eq!(message_spans(dup), Some(vec![None]));
        let trailing = b"\x81\xa1m\x81\xa1a\x01\x00";
        assert_eq!(message_spans(trailing), None);
    }

    #[test]
    fn integers() {
        for (enc, ok) in [
            (&b"\xd0\xdf"[..], true),     // -33 as int 8
            (&b"\xd0\xe0"[..], false),    // -32 fits a negative fixint
            (&b"\xd1\xff\x7f"[..], true), // -129 as int 16
            (&b"\xd1\xff\x80"[..], false),
            (&b"\xcf\x00\x00\x00\x01\x00\x00\x00\x00"[..], true),
            (&b"\xcf\x00\x00\x00\x00\xff\xff\xff\xff"[..], false),
        ] {
            let mut r = Reader { b: enc, p: 0 };
            assert_eq!(value(&mut r, 0), Some(ok), "{enc:?}");
        }
    }
}

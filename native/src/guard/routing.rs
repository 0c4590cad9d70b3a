//! The routing parts a broker decodes for every publication before its guard and matching
//! run, as pure checks (no PyO3, fuzzed by `native/fuzz/`): PSGuard's and the default
//! profile's `{m, n, t}` (psguard.txt §3.1: the mode, the nonce `r` and the tags `F_T(r)`;
//! `schemes/psguard/wire.py` `parse_routing`) and EventGuard's `{tokens: T(w_1) || ...}`
//! (eventguard.txt §4.4; `schemes/eventguard/wire.py` `parse_tokens`). The Python functions
//! are the spec: these accept exactly what they accept and give the same values; anything
//! else is left to them (they word the errors).

/// psguard/tokens.py `NONCE_BYTES`: a randomized event's nonce `r`.
pub const NONCE_BYTES: usize = 16;
/// psguard/wire.py `MAX_EVENT_TAGS`: tags one publication may carry.
pub const MAX_EVENT_TAGS: usize = 4096;
/// eventguard/wire.py `TOKEN_BYTES`: one topic token `T(w)`.
pub const TOKEN_BYTES: usize = 32;
/// eventguard/wire.py `MAX_TOPICS`: tokens one publication may carry.
pub const MAX_TOPICS: usize = 64;

/// A PSGuard routing mode (psguard/wire.py `_MODE_NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Randomized,
    Deterministic,
}

impl Mode {
    /// The mode of the wire's `m` ("r" or "d"), None otherwise.
    pub fn from_wire(m: &str) -> Option<Mode> {
        match m {
            "r" => Some(Mode::Randomized),
            "d" => Some(Mode::Deterministic),
            _ => None,
        }
    }

    /// Its name in a decoded `TokenEvent`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Randomized => "randomized",
            Mode::Deterministic => "deterministic",
        }
    }
}

/// The tags of a `{m, n, t}` routing part whose mode, nonce and packed tags are these, or
/// None when `parse_routing` refuses them: the nonce's length must fit the mode, and the
/// tags are whole big-endian int64 values, at most `MAX_EVENT_TAGS`.
pub fn token_tags(mode: Mode, nonce: &[u8], packed: &[u8]) -> Option<Vec<i64>> {
    let want = match mode {
        Mode::Randomized => NONCE_BYTES,
        Mode::Deterministic => 0,
    };
    if nonce.len() != want || !packed.len().is_multiple_of(8) || packed.len() / 8 > MAX_EVENT_TAGS {
        return None;
    }
    Some(
        packed
            .chunks_exact(8)
            .map(|c| i64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect(),
    )
}

/// How many tokens an EventGuard `tokens` blob holds, or None when `parse_tokens` refuses
/// it (not whole `TOKEN_BYTES`-byte tokens, or not 1..=`MAX_TOPICS` of them).
pub fn eg_token_count(blob: &[u8]) -> Option<usize> {
    let n = blob.len() / TOKEN_BYTES;
    if !blob.len().is_multiple_of(TOKEN_BYTES) || !(1..=MAX_TOPICS).contains(&n) {
        return None;
    }
    Some(n)
}

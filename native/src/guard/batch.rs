//! Ed25519 batch verification of a run's single-signature publications (eventguard and
//! default guards; RFC 8032 §5.1.7 via `crate::ed25519::batch`), pure: no PyO3.
//!
//! Before a run is checked frame by frame, its glue (`py.rs`) asks the core, for each frame,
//! which signature the check would verify and on what (`EgGuard::batch_item`,
//! `DfGuard::batch_item`: reads only, no callback, no state change) and hands those items to
//! `SigBatches::run`, which verifies them as one batch. When the check then reaches a
//! signature, `verified` says whether the batch verified exactly that key, signature and
//! message; if so the owner's single verification is skipped, otherwise (a failed batch,
//! another key or message, a frame the pre-pass could not read) it runs as without the
//! batch. Verdicts and state are therefore those of one check per frame, and a forged
//! signature is still dropped as forged: it fails its batch, whose signatures are then each
//! checked alone. Each signature enters at most one batch attempt (`tried`), so a forgery
//! costs its run one failed batch, never a loop. The one way a batch judges differently
//! from OpenSSL (an `R` with a small-order component, which only the key's holder can make)
//! is in `ed25519.rs`'s notes; `ed25519::batch` sends every other doubtful case to the
//! single check.

use super::core::{SigItem, HOT_CAPACITY};
use std::collections::{HashMap, HashSet};

/// The fewest signatures worth a batch (one alone is checked as before).
pub const BATCH_MIN: usize = 2;

/// A guard's batch state: on or off, the signatures tried and those verified.
pub struct SigBatches {
    pub enabled: bool,
    /// signatures that went into a batch attempt (each goes into one at most)
    tried: HashSet<Vec<u8>>,
    /// sig -> (key, message) verified in a batch
    batched: HashMap<Vec<u8>, (Vec<u8>, Vec<u8>)>,
    /// signatures verified in batches (counted when the batch ran)
    pub verified: u64,
}

impl SigBatches {
    pub fn new(enabled: bool) -> Self {
        SigBatches {
            enabled,
            tried: HashSet::new(),
            batched: HashMap::new(),
            verified: 0,
        }
    }

    /// Whether `sig` may still enter a batch.
    pub fn untried(&self, sig: &[u8]) -> bool {
        !self.tried.contains(sig)
    }

    /// Verify `items` (distinct, untried signatures) as one batch when there are at least
    /// `BATCH_MIN` of them, and remember what it verified.
    pub fn run(&mut self, items: Vec<SigItem>) {
        if items.len() < BATCH_MIN {
            return;
        }
        let mut pks = Vec::with_capacity(items.len());
        let mut sigs = Vec::with_capacity(items.len());
        let mut msgs = Vec::with_capacity(items.len());
        for it in items {
            pks.push(it.pk);
            sigs.push(it.sig);
            msgs.push(it.msg);
        }
        let ok = crate::ed25519::batch(&pks, &sigs, &msgs);
        if self.tried.len() + sigs.len() > HOT_CAPACITY {
            self.tried.clear();
            self.batched.clear();
        }
        for (((pk, sig), msg), good) in pks.into_iter().zip(sigs).zip(msgs).zip(ok) {
            self.tried.insert(sig.clone());
            if good {
                self.verified += 1;
                self.batched.insert(sig, (pk, msg));
            }
        }
    }

    /// Whether a batch verified `sig` by `pk` on `msg` (exactly these bytes).
    pub fn verified(&self, pk: &[u8], sig: &[u8], msg: &[u8]) -> bool {
        matches!(self.batched.get(sig), Some((k, m)) if k[..] == *pk && m[..] == *msg)
    }
}

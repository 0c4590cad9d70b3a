"""Searchable encryption of routing vectors: Song-Wagner-Perrig for SRV, PRF codewords for SRV-fast.

Theory of operation
-------------------
vcaps.txt §5.1-5.2 hides the routing vector with the scheme of Song, Wagner and Perrig [18]:
each 16-byte filter ID is a *word* ``W``, a routing vector is a *document*, the publisher is
Alice (it holds ``keys = {k_w, k', k_seed}``) and the brokers are Bob. With ``n = 16`` byte
words and ``m = 8`` check bytes (SWP §4, the final scheme):

- pre-encryption ``X = E_{k_w}(W)`` (one AES block: the word *is* the block), split
  ``X = <L, R>`` with ``|L| = n - m``;
- the word key ``k = f_{k'}(L)`` (HMAC-SHA256 truncated to 16 bytes);
- the stream value ``S_i = G_{k_seed}(nonce, i)``: AES in counter mode over a fresh 8-byte
  nonce per encrypted document, so the same ID yields different cipher words in two
  notifications (vcaps.txt §5: "even if two notifications ... both contain filter F_2 in the
  RV, it should generate different ciphertexts");
- ``T_i = <S_i, F_k(S_i)>`` (``F``: HMAC-SHA256 truncated to ``m`` bytes) and the cipher word
  ``C_i = X_i xor T_i``.

𝓔 (:meth:`SwpKeys.encrypt`) does the above for a list of words, 𝓕 (:meth:`SwpKeys.query`) returns
the search token ``Q = {x, k}`` (``x = X``, the *encrypted search word*), and 𝓜 (:func:`swp_match`)
tests a cipher word: ``T = C xor x = <S, t>`` matches iff ``t = F_k(S)`` (a false match has
probability ``2^-64`` per test). Only ``crypto/`` primitives are used (AES via
:class:`~pubguard.crypto.AesPrf`, HMAC via :class:`~pubguard.crypto.KeyedHash`).

SRV-fast (ours, beyond the paper) replaces 𝓜's per-pair HMAC with one PRF per held filter: a
notification carries a fresh 16-byte nonce ``n`` and ``V = {PRF(k_f, n) : f matched}``; a broker
holding ``k_f`` computes ``PRF(k_f, n)`` once and looks it up in ``V`` (a set). ``PRF`` is AES
(:func:`codeword`); ``k_f`` is derived from the filter ID under the publisher's ``k_fast``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from random import Random
from typing import Final

from pubguard.crypto import KH, AesPrf, KeyedHash, SecretBytes, hkdf, random_bytes
from pubguard.errors import ValidationError

__all__ = [
    "CHECK_BYTES",
    "ID_BYTES",
    "SearchToken",
    "SwpKeys",
    "codeword",
    "swp_match",
    "swp_match_any",
]

#: vcaps.txt §6.1: "The length of filter ID was chosen to be 16 bytes as this is also the block
#: size of AES" - the SWP word length n
ID_BYTES: Final = 16
#: SWP's m: bytes of F_k(S) checked per cipher word (false match 2^-64 per test)
CHECK_BYTES: Final = 8
_L: Final = ID_BYTES - CHECK_BYTES  # |L| = |S| = n - m


@dataclass(frozen=True, slots=True)
class SearchToken:
    """SWP's ``Q = {x, k}`` for one filter ID (vcaps.txt §5.3 step 3: ``Q_{ID_F}``). ``k`` is a
    secret a broker is granted; the repr shows only ``x``'s prefix."""

    x: bytes
    k: bytes

    def __post_init__(self) -> None:
        if len(self.x) != ID_BYTES or len(self.k) != ID_BYTES:
            raise ValidationError("an SRV search token is two 16-byte values")

    def __repr__(self) -> str:
        return f"SearchToken(x={self.x[:4].hex()}..)"


class SwpKeys:
    """The publisher's ``keys = {k_w, k', k_seed}`` (vcaps.txt §5.1), plus ``k_fast`` for
    SRV-fast codeword keys, all derived from one master secret (HKDF, distinct labels)."""

    __slots__ = ("_E", "_f", "_fast", "_seed")

    def __init__(self, master: SecretBytes | bytes) -> None:
        m = master if isinstance(master, SecretBytes) else SecretBytes(master)
        self._E = AesPrf(hkdf(m, info=b"pubguard/vcaps/swp/k_w", length=16))  # noqa: N815
        self._f = KeyedHash(hkdf(m, info=b"pubguard/vcaps/swp/k_prime"))
        self._seed = AesPrf(hkdf(m, info=b"pubguard/vcaps/swp/k_seed", length=16))
        self._fast = KeyedHash(hkdf(m, info=b"pubguard/vcaps/fast/k_fast"))

    def __repr__(self) -> str:
        return "SwpKeys(<secret>)"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("SwpKeys is not picklable")

    # -- SWP ---------------------------------------------------------------------------------
    def query(self, word: bytes) -> SearchToken:
        """𝓕(W, keys) = {x, k}: the encrypted search word and its search key."""
        x = self._E(_word(word))
        return SearchToken(x, self._f(x[:_L])[:ID_BYTES])

    def encrypt(self, words: Sequence[bytes], *, rng: Random | None = None) -> tuple[bytes, ...]:
        """𝓔(D, keys) with a fresh pseudorandom stream (a random 8-byte nonce per call)."""
        nonce = random_bytes(8, rng)
        stream = self._seed(b"".join(nonce + struct.pack(">Q", i) for i in range(len(words))))
        out = []
        for i, w in enumerate(words):
            q = self.query(w)
            s = stream[16 * i : 16 * i + _L]
            t = s + KH(q.k, s)[:CHECK_BYTES]
            out.append(_xor(q.x, t))
        return tuple(out)

    # -- SRV-fast ---------------------------------------------------------------------------
    def fast_key(self, word: bytes) -> bytes:
        """``k_f``: the codeword key of a filter ID (granted to brokers holding it)."""
        return self._fast(b"k_f" + _word(word))[:ID_BYTES]

    def fast_handle(self, word: bytes) -> bytes:
        """The BFPoset key of a filter under SRV-fast: a pseudonym of its ID."""
        return self._fast(b"h" + _word(word))[:ID_BYTES]


def codeword(prf: AesPrf, nonce: bytes) -> bytes:
    """SRV-fast's ``PRF(k_f, n)`` with ``prf = AesPrf(k_f)`` and a 16-byte nonce."""
    return prf(nonce)


def swp_match(cipher_word: bytes, x: int, f: KeyedHash) -> bool:
    """𝓜 for one cipher word: ``x`` is the search token's ``x`` as an int, ``f`` its ``F_k``."""
    t = (int.from_bytes(cipher_word, "big") ^ x).to_bytes(ID_BYTES, "big")
    return f(t[:_L])[:CHECK_BYTES] == t[_L:]


def swp_match_any(words: Iterable[bytes], x: int, f: KeyedHash) -> bool:
    """𝓜(Z, Q): whether any cipher word of ``words`` is the token's word."""
    for c in words:
        t = (int.from_bytes(c, "big") ^ x).to_bytes(ID_BYTES, "big")
        if f(t[:_L])[:CHECK_BYTES] == t[_L:]:
            return True
    return False


def _word(w: bytes) -> bytes:
    if type(w) is not bytes or len(w) != ID_BYTES:
        raise ValidationError("a filter ID is 16 bytes")
    return w


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")

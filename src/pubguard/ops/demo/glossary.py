"""The terms the demo uses that a reader may not know, each with a one-line gloss, printed
where the demo first uses the term (a gloss line fits 80 columns)."""

from __future__ import annotations

from typing import Final

__all__ = ["GLOSSES", "gloss"]

GLOSSES: Final[dict[str, str]] = {
    "KDC": "key distribution centre, gives each client only what its policy allows",
    "PKCS#8": "the standard format for a private key, here encrypted by a passphrase",
    # psguard.txt §4.1: a routable attribute <r, F_{T(w)}(r)>, r a nonce, F a PRF
    "<r, F_T(r)>": "a fresh random r and F_T(r), a PRF keyed by the topic's token T",
    # eventguard.txt §4.4: the publisher signs the root of a Merkle tree over a batch
    "Merkle root of 8": "one signature covers 8 events; each carries its hash path",
}


def gloss(term: str) -> str:
    """``term``'s gloss as the line the demo prints (indented under the line using it)."""
    return f"  {term}: {GLOSSES[term]}"

"""Regenerate tests/data/key_vectors.json from the code (run once; review the diff).

    .venv/bin/python -m tests.keys.make_vectors

tests/keys/test_vectors.py checks the code against the file *and* recomputes entries
independently with hashlib/hmac, so the vectors are verified, not merely echoed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pubguard.crypto import SecretBytes
from pubguard.keys import KDC, MetaService, TopicKeys

OUT = Path(__file__).resolve().parents[1] / "data" / "key_vectors.json"
MASTER_HEX = bytes(range(32)).hex()
R, LC = 32, 4  # psguard.txt Figure 1


def psguard() -> list[dict[str, Any]]:
    kdc = KDC(SecretBytes(bytes.fromhex(MASTER_HEX)))
    w, p = "cancerTrail", "P1"
    tk = kdc.topic(w)
    v: list[dict[str, Any]] = []

    def add(name: str, formula: str, inputs: dict[str, Any], out: bytes) -> None:
        v.append({"name": name, "formula": formula, "inputs": inputs, "hex": out.hex()})

    add("topic_key", "K(w) = KH_rk(w)", {"w": w}, kdc.topic_key(w).reveal())
    add(
        "publisher_key",
        "K^P(w) = KH_rk(P || 0x00 || w)",
        {"P": p, "w": w},
        kdc.publisher_key(p, w).reveal(),
    )
    add("topic_token", "T(w) = KH_rk(0x00 'token' 0x00 w)", {"w": w}, kdc.topic_token(w))
    add(
        "epoch_topic_key",
        "K_e(w) = KH_{rk_e}(w), rk_e = KH_rk(0x00 'epoch' 0x00 ascii(e))",
        {"w": w, "epoch": 3},
        kdc.for_epoch(3).topic_key(w).reveal(),
    )
    add(
        "numeric_root",
        "K_root = KH_{K(w)}(num)",
        {"w": w, "num": "age"},
        tk.numeric_key("age", "").reveal(),
    )
    for node in ["1", "10", "101", "01", "100"]:
        add(
            "numeric_node",
            "K_{xi||b} = H(K_xi || b)",
            {"w": w, "num": "age", "ktid": node},
            tk.numeric_key("age", node).reveal(),
        )
    leaf, key = kdc.numeric_event_key(w, "age", 22, R, LC)
    add(
        "numeric_event_key",
        "K(e) = K_{ktid(v)}",
        {"w": w, "num": "age", "value": 22, "range_size": R, "least_count": LC, "ktid": leaf},
        key.reveal(),
    )
    for node, k in kdc.numeric_auth_keys(w, "age", 8, 19, R, LC).items():
        add(
            "numeric_auth_key",
            "cover [8, 19]",
            {
                "w": w,
                "num": "age",
                "low": 8,
                "high": 19,
                "range_size": R,
                "least_count": LC,
                "ktid": node,
            },
            k.reveal(),
        )
    pub = TopicKeys(kdc.publisher_key(p, w))
    add(
        "publisher_numeric_node",
        "K_root = KH_{K^P(w)}(num), then H chain",
        {"P": p, "w": w, "num": "age", "ktid": "101"},
        pub.numeric_key("age", "101").reveal(),
    )
    for path in [(), ("vehicle",), ("vehicle", "car"), ("vehicle", "car", "sedan")]:
        add(
            "category_node",
            "K_root = KH_{K(w)}('category' 0x00 attr); K_{p/c} = H(K_p || c)",
            {"w": w, "attr": "kind", "path": list(path)},
            tk.category_key("kind", path).reveal(),
        )
    for s in ["", "a", "ab", "abc"]:
        add(
            "prefix_node",
            "K_root = KH_{K(w)}('prefix' 0x00 attr); K_{s||c} = H(K_s || utf8(c))",
            {"w": w, "attr": "drug", "prefix": s},
            tk.prefix_key("drug", s).reveal(),
        )
    for s in ["", "g", "ing", "sing"]:
        add(
            "suffix_node",
            "K_root = KH_{K(w)}('suffix' 0x00 attr); chain over the reversed string",
            {"w": w, "attr": "drug", "suffix": s},
            tk.suffix_key("drug", s).reveal(),
        )
    add(
        "node_token",
        "KH_{K(w)}(0x00 'token' 0x00 kind 0x00 attr 0x00 node)",
        {"w": w, "kind": "numeric", "attr": "age", "node": "101"},
        tk.node_token("numeric", "age", "101"),
    )
    return v


def eventguard() -> list[dict[str, Any]]:
    ms = MetaService(SecretBytes(bytes.fromhex(MASTER_HEX)), epoch_length=86400.0)
    v: list[dict[str, Any]] = []

    def add(name: str, formula: str, inputs: dict[str, Any], out: bytes) -> None:
        v.append({"name": name, "formula": formula, "inputs": inputs, "hex": out.hex()})

    add("topic_token", "T(w) = H(KH_rk(w))", {"w": "news"}, ms.topic_token("news"))
    for e in (0, 12):
        add(
            "epoch_key",
            "K(w, e) = KH_{KH_rk(ascii(e))}(w)",
            {"w": "news", "epoch": e},
            ms.epoch_key("news", e).reveal(),
        )
    add("ust", "UST = KH_rk(sbId)", {"sb_id": bytes(16).hex()}, ms.ust(bytes(16)).reveal())
    add(
        "uat",
        "UAT = KH_rk(adId)",
        {"ad_id": bytes(range(16, 32)).hex()},
        ms.uat(bytes(range(16, 32))).reveal(),
    )
    add("ms_public_key", "Ed25519 from seed KH_rk(0x00 'ms-signing')", {}, ms.public_key.to_bytes())
    g = ms.subscribe("alice", "news", now=86400.0 * 3 + 5, rng=random.Random(2024))
    add(
        "subscription_permit",
        "to_bytes() of sb(w); Ed25519 signature over signed_bytes()",
        {"subscriber": "alice", "w": "news", "now": 86400.0 * 3 + 5, "rng_seed": 2024},
        g.permit.to_bytes(),
    )
    return v


def main() -> None:
    data = {
        "_note": "Generated by tests/keys/make_vectors.py from the code; spot-checked independently "
        "in tests/keys/test_vectors.py. See docs/key-derivation.md.",
        "master_hex": MASTER_HEX,
        "psguard": psguard(),
        "eventguard": eventguard(),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

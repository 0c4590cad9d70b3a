"""The PSGuard KDC: topic/publisher keys, epochs, category and string trees, tokens, bad input."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.crypto import H, SecretBytes
from pubguard.errors import KeyError_, ValidationError
from pubguard.keys import (
    KDC,
    CategoryTree,
    TopicKeys,
    derive_category,
    derive_from,
    derive_prefix,
    derive_suffix,
)

MASTER = SecretBytes(bytes(range(32)))


def _kh(k: bytes, m: bytes) -> bytes:
    return hmac.new(k, m, hashlib.sha256).digest()


def test_topic_and_publisher_keys_match_the_paper() -> None:
    kdc = KDC(MASTER)
    rk = MASTER.reveal()
    assert kdc.topic_key("cancerTrail").reveal() == _kh(rk, b"cancerTrail")
    assert kdc.publisher_key("P1", "cancerTrail").reveal() == _kh(rk, b"P1\x00cancerTrail")
    root = kdc.numeric_key("cancerTrail", "age", "")
    assert root.reveal() == _kh(_kh(rk, b"cancerTrail"), b"age")


def test_replicas_agree_and_masters_differ() -> None:
    a, b, c = KDC(MASTER), KDC(SecretBytes(MASTER.reveal())), KDC(SecretBytes(b"x" * 32))
    assert a.numeric_auth_keys("w", "n", 3, 70, 128, 1) == b.numeric_auth_keys(
        "w", "n", 3, 70, 128, 1
    )
    assert a.topic_key("w") != c.topic_key("w")


def test_domains_are_separated() -> None:
    kdc = KDC(MASTER)
    keys = [
        kdc.topic_key("w").reveal(),
        kdc.publisher_key("P", "w").reveal(),
        kdc.topic_token("w"),
        kdc.numeric_key("w", "a", "").reveal(),
        kdc.category_key("w", "a", ()).reveal(),
        kdc.prefix_key("w", "a", "").reveal(),
        kdc.suffix_key("w", "a", "").reveal(),
        kdc.node_token("w", "numeric", "a", ""),
        kdc.for_epoch(0).topic_key("w").reveal(),
        kdc.for_epoch(1).topic_key("w").reveal(),
    ]
    assert len(set(keys)) == len(keys)
    # the token never reveals the key it routes for
    assert kdc.topic_token("w") != H(kdc.topic_key("w").reveal())


def test_per_publisher_trees_are_independent() -> None:
    kdc = KDC(MASTER)
    k_p = kdc.numeric_event_key("w", "age", 22, 32, 4, publisher="P")[1]
    k_q = kdc.numeric_event_key("w", "age", 22, 32, 4, publisher="Q")[1]
    k = kdc.numeric_event_key("w", "age", 22, 32, 4)[1]
    assert len({k_p, k_q, k}) == 3
    # a publisher holding K^P(w) computes its own tree locally
    assert TopicKeys(kdc.publisher_key("P", "w")).numeric_event_key("age", 22, 32, 4)[1] == k_p


def test_publisher_computes_event_keys_without_master() -> None:
    kdc = KDC(MASTER)
    pub = TopicKeys(kdc.topic_key("w"))
    assert pub.numeric_event_key("age", 17, 32, 4) == kdc.numeric_event_key("w", "age", 17, 32, 4)
    assert pub.node_token("numeric", "age", "10") == kdc.node_token("w", "numeric", "age", "10")
    assert "TopicKeys(<secret>)" == repr(pub)


def test_epochs_rekey_everything() -> None:
    kdc = KDC(MASTER)
    e1, e2 = kdc.for_epoch(1), kdc.for_epoch(2)
    assert e1.topic_key("w") != e2.topic_key("w") != kdc.topic_key("w")
    assert KDC(MASTER).for_epoch(1).topic_key("w") == e1.topic_key("w")
    with pytest.raises(ValidationError):
        kdc.for_epoch(-1)


def test_category_tree_derivation() -> None:
    tree = CategoryTree.from_paths(
        [("vehicle", "car", "sedan"), ("vehicle", "car", "suv"), ("vehicle", "truck")]
    )
    kdc = KDC(MASTER)
    car = tree.path("car")
    assert car == ("vehicle", "car")
    auth = kdc.category_key("w", "kind", car)
    for leaf in tree.descendants("car"):
        p = tree.path(leaf)
        assert derive_category(car, auth, p) == kdc.category_key("w", "kind", p)
    with pytest.raises(KeyError_, match="not an ancestor"):
        derive_category(car, auth, tree.path("truck"))
    with pytest.raises(KeyError_):
        derive_category(car, auth, ("vehicle",))
    assert tree.is_descendant("sedan", "vehicle") and not tree.is_descendant("truck", "car")
    assert sorted(tree.descendants("car")) == ["car", "sedan", "suv"]


def test_category_tree_validation() -> None:
    with pytest.raises(ValidationError, match="cycle"):
        CategoryTree({"a": "b", "b": "a"})
    with pytest.raises(ValidationError, match="two parents"):
        CategoryTree.from_paths([("a", "x"), ("b", "x")])
    with pytest.raises(ValidationError, match="unknown category"):
        CategoryTree({"a": None}).path("z")
    with pytest.raises(ValidationError):
        KDC(MASTER).category_key("w", "kind", "vehicle")  # a str is not a path


@given(prefix=st.text(max_size=6), rest=st.text(max_size=6), other=st.text(min_size=1, max_size=6))
def test_string_prefix_and_suffix_chains(prefix: str, rest: str, other: str) -> None:
    prefix, rest, other = (s.replace("\x00", "") for s in (prefix, rest, other))
    kdc = KDC(MASTER)
    value = prefix + rest
    pk = kdc.prefix_key("w", "name", prefix)
    assert derive_prefix(prefix, pk, value) == kdc.prefix_key("w", "name", value)
    sk = kdc.suffix_key("w", "name", prefix)
    assert derive_suffix(prefix, sk, rest + prefix) == kdc.suffix_key("w", "name", rest + prefix)
    if other and not (other + value).startswith(prefix):
        with pytest.raises(KeyError_):
            derive_prefix(prefix, pk, other + value)


def test_prefix_chain_is_per_character() -> None:
    kdc = KDC(MASTER)
    ab = kdc.prefix_key("w", "s", "ab")
    assert kdc.prefix_key("w", "s", "abc").reveal() == H(ab.reveal() + b"c")
    assert kdc.prefix_key("w", "s", "abé").reveal() == H(ab.reveal() + "é".encode())
    # prefix and suffix trees never share keys, even for palindromes
    assert kdc.prefix_key("w", "s", "aba") != kdc.suffix_key("w", "s", "aba")


@pytest.mark.parametrize(
    "call",
    [
        lambda k: k.topic_key(""),
        lambda k: k.topic_key("a\x00b"),
        lambda k: k.topic_key(5),
        lambda k: k.publisher_key("", "w"),
        lambda k: k.numeric_auth_keys("w", "", 0, 3, 4, 1),
        lambda k: k.numeric_auth_keys("w", "a", 0, 3, 6, 1),
        lambda k: k.node_token("w", "bogus", "a", "0"),
        lambda k: k.prefix_key("w", "a", "x\x00"),
    ],
)
def test_bad_input_is_validation_error(call: object) -> None:
    with pytest.raises(ValidationError):
        call(KDC(MASTER))  # type: ignore[operator]


def test_short_master_refused() -> None:
    with pytest.raises(ValidationError, match="at least 16 bytes"):
        KDC(SecretBytes(b"short"))


def test_auth_keys_share_ancestors_and_match_single_derivations() -> None:
    kdc = KDC(MASTER)
    auth = kdc.numeric_auth_keys("w", "n", 1, 16382, 16384, 1)
    assert len(auth) == 2 * 14 - 2  # the worst case of psguard.txt Table 1 at |R| = 2^14
    for node, key in auth.items():
        assert key == kdc.numeric_key("w", "n", node)
        assert derive_from(node, key, node + "0" * (14 - len(node))) == kdc.numeric_key(
            "w", "n", node + "0" * (14 - len(node))
        )


def test_keys_all_is_importable() -> None:
    import pubguard.keys as keys

    for name in keys.__all__:
        assert getattr(keys, name) is not None, name
    assert len(set(keys.__all__)) == len(keys.__all__)

"""The composed default profile: PSGuard's authorisation and unlinkable tokens, EventGuard's
signatures and flood containment, Narada's replay defence and revocation, per-attribute AEAD.
"""

__all__: list[str] = []

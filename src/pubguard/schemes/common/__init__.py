"""What several profiles share: the guards (timestamp and id windows, strike counters, signed
Merkle roots), the guard runner, Narada's replay state, Merkle batches, verified-credential
caches and the authority-signed revocation list.
"""

__all__: list[str] = []

"""The demos: the multi-domain hospital network (psguard.txt §1) and its live revocation act."""

__all__: list[str] = []

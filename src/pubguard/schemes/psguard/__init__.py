"""The PSGuard profile (psguard.txt): key trees, tokenised routing with randomized tokens, sealed
secret attributes, the stateless KDC's authority, and the profile on the broker network.
"""

__all__: list[str] = []

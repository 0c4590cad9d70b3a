"""Key services over mutual TLS: the EventGuard meta-service, the PSGuard KDC and default
authority, revocation, the Narada KMC node, and their clients.
"""

__all__: list[str] = []

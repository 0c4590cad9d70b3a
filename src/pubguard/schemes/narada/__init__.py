"""The NaradaBrokering secure-delivery profile (narada-secure-delivery.txt): KMC security tokens,
signed and encrypted payloads, broker token, rights and CRL checks, replay defence.
"""

__all__: list[str] = []

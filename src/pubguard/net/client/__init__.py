"""The client library users import: connect to a broker over mutual TLS, publish, subscribe,
renew keys across epochs, withdraw.
"""

__all__: list[str] = []

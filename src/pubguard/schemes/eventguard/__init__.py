"""The EventGuard profile (eventguard.txt): the meta-service's tokens, keys and permits, the six
guards at the broker, and the publisher and subscriber.
"""

__all__: list[str] = []

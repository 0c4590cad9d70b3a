"""Running things: local clusters and their PKI, key-service processes, soaks, demos, benchmarks."""

__all__: list[str] = []

"""Secure dissemination on Spark: pure ``DataFrame -> DataFrame`` stages (protect, match,
open) where executors play untrusted brokers and see only tokens and ciphertext; batch runs,
Structured Streaming and the pipeline benchmark (docs/pipeline.md)."""

__all__: list[str] = []

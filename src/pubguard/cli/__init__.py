"""The ``pubguard`` command line (click). Each command group lives in its own module."""

__all__: list[str] = []

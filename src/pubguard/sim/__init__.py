"""sim layer (see ARCHITECTURE.md)."""

__all__: list[str] = []

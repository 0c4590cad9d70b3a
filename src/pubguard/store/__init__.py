"""store layer: SQLite persistence for broker and key-service state (see ARCHITECTURE.md)."""

from pubguard.store.sqlite import BUSY_TIMEOUT_MS, Database, Migration, open_database, row_to

__all__ = ["BUSY_TIMEOUT_MS", "Database", "Migration", "open_database", "row_to"]

"""The broker process: the asyncio server around the sans-IO broker core, its reliable links,
batch processing, the parent link, revocation polling, and ``python -m`` entry point.
"""

__all__: list[str] = []

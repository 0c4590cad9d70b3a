"""pubguard: secure content-based publish/subscribe.

Layers (dependencies point downward only, see ARCHITECTURE.md):
cli > net > pipeline > sim > broker > overlay > schemes > keys > store > matching > crypto > model
"""

from pubguard.errors import PubguardError

__version__ = "0.1.0"
__all__ = ["PubguardError", "__version__"]

# The C type has the fields of the pure-Python fallback, which declares them once.
from ._canned import CannedBase as Canned

__all__ = ["Canned"]

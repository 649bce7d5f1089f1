"""otspec: exact optimal-transport mathematics of speculative-decoding verification."""

from otspec.laws import explicit, greedy, iid, product, without_replacement

__all__ = ["iid", "without_replacement", "greedy", "product", "explicit"]
__version__ = "0.1.0"

"""Recording backends: ``torch`` (plain forward hooks, default), ``transformer_lens``, ``nnsight``."""

from probes.backends.base import Backend, HookFiringError, make_backend, reduce_positions

__all__ = ["Backend", "HookFiringError", "make_backend", "reduce_positions"]

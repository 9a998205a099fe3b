"""The held-out evaluation split (``probe synthesize --split heldout``): its own vocabulary, rows and overlap check.

See :mod:`data_synthesis.heldout.build` for the rows and docs/data.md for the checkers and the discrimination gate.
"""

"""The held-out evaluation split (``probe synthesize --split heldout``): its own vocabulary, rows and overlap check.

See :mod:`data_synthesis.heldout.build` for the rows and docs/data.md for the checkers and the discrimination gate.

Modules:
    vocab       the split's own vocabulary: fields, facts, roles, replies and constraint phrasings
    build       the rows: verifiable constraints, carry-over over three turns, priority triples, role boundaries
    files       writing the split, and the one place every command gets it from
    overlap     how much of the split the training data has seen: shared word 8-grams, with a bound that fails
    gate        the discrimination gate, fixed in docs/data.md before any model was evaluated on the split
"""

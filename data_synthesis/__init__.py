"""Data synthesis: RoleMRC-format datasets, offline or through an LLM endpoint, and their validation.

Modules:
    dataset     ``synthesize_dataset``: a dataset from either backend, as its config says (``probe synthesize``)
    validate    a RoleMRC JSONL file of any kind checked and summarised (``probe validate``)
    offline/    the seeded offline synthesizer: no network, seconds to run
    llm/        the paper's three-stage synthesis with an LLM writing the text
    heldout/    the held-out evaluation split: its own vocabulary, rows, overlap check and discrimination gate
"""

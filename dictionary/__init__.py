"""Dictionary: a learned dictionary of the SFT/DPO difference at one layer (``probe dictionary``).

Modules:
    config      ``DictionaryConfig``, every setting, checked up front
    text        the text mix (the pair's chat data, prose installed by name, or ``--text``), 10% held out
    store       the sharded, resumable activation store bound to the pair's fingerprints
    harvest     both models up to the layer, every kept token into the store
    coders      the BatchTopK crosscoder and diff-SAE (plain torch)
    train       the training loop (Adam, AuxK, a shuffle buffer over shards) and the null dictionary
    measures    FVE, L0, dead latents, relative norms and classes, Latent Scaling
    controls    the null dictionary's count and the planted pair's alignment
    causal      latent sets patched through ``access.outcomes.Outcomes`` (the KL gap closed)
    cards       per-latent cards drawn by ``probe explain``'s card code
    report      the summary, the latent records and the HTML page, one set per kind
    records     what the steps pass on (``Prepared``, ``DictionaryResult``) and JSON
    run         ``dictionary_run``, the whole stage from a plain config

Example:
    >>> from dictionary.config import DictionaryConfig
    >>> DictionaryConfig().kind
    'crosscoder'
"""

"""Dictionary: a learned dictionary of the SFT/DPO difference at one layer (``probe dictionary``).

Modules, in the order a run uses them:

* :mod:`dictionary.config` — :class:`~dictionary.config.DictionaryConfig`, every setting, checked up front;
* :mod:`dictionary.text` — the text mix (the pair's chat data, prose installed by name, or ``--text``), 10% held out;
* :mod:`dictionary.store` — the sharded, resumable activation store bound to the pair's fingerprints;
* :mod:`dictionary.harvest` — both models up to the layer, every kept token into the store;
* :mod:`dictionary.coders` — the BatchTopK crosscoder and diff-SAE (plain torch);
* :mod:`dictionary.train` — the training loop (Adam, AuxK, a shuffle buffer over shards) and the null dictionary;
* :mod:`dictionary.measures` — FVE, L0, dead latents, relative norms and classes, Latent Scaling;
* :mod:`dictionary.controls` — the null dictionary's count and the planted pair's alignment;
* :mod:`dictionary.causal` — latent sets patched through :class:`access.outcomes.Outcomes` (the KL gap closed);
* :mod:`dictionary.cards` — per-latent cards drawn by ``probe explain``'s card code;
* :mod:`dictionary.report` — ``summary.json`` and the HTML page;
* :mod:`dictionary.records` — what the steps pass on (``Prepared``, ``DictionaryResult``) and JSON;
* :mod:`dictionary.run` — :func:`~dictionary.run.dictionary_run`, the whole stage from a plain config.

Example:
    >>> from dictionary.config import DictionaryConfig
    >>> DictionaryConfig().kind
    'crosscoder'
"""

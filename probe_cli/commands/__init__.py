"""The ``probe`` commands, one module each with a ``register(app)`` that :mod:`probe_cli.main` calls.

Modules:
    synthesize  ``probe synthesize`` and ``probe validate``
    train       ``probe train sft|dpo``
    models      ``probe models default|eval|fetch-base``
    judge       ``probe judge``
    run         ``probe run``: record the pair's activations
    analyze     ``probe analyze``: maps, neuron sets, plots
    explain     ``probe explain``: a neuron card per top unit
    intervene   ``probe intervene``: the placebo-controlled A/B evaluation
    lmeval      ``probe lmeval``: any lm-eval task before and after an edit
    replicate   ``probe replicate``: the §7 study from recording to the report
    report      ``probe report``: the HTML report of the study
    dictionary  ``probe dictionary``: a crosscoder or diff-SAE of the SFT/DPO difference at one layer
    localize    ``probe localize``: faithfulness curves, the layer and component profile, their verdicts
"""

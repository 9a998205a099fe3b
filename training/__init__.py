"""Training: SFT and DPO with TRL, the bases and the embedded default pairs, and the pair's evaluation.

Modules:
    config, runner          run configurations for SFT and DPO (recipes, overrides, validation); what both runs share
    data                    RoleMRC SFT/DPO files as the conversational datasets TRL expects
    sft, dpo                supervised fine-tuning (``SFTTrainer``) and direct preference optimisation (``DPOTrainer``)
    callbacks, interrupts   loss records, step reports and Ctrl-C at a step boundary; resuming from the checkpoint kept
    progress, provenance    one progress line per stage; ``provenance.json``, what produced a model directory
    smollm2                 the SmolLM2-135M-Instruct base, offline, as a plain Hugging Face model directory
    tiny_base, pretrain     the tiny base: a byte-level BPE tokenizer and a random Llama, warm-started, grown in depth
    default_pair, planted   the embedded default pairs; the planted pair, whose change is confined to documented units
    eval_config, evaluate   ``PairEvalConfig``; per-capability compliance of a pair, judged, with paired statistics
    eval_rows               the evaluation's table rows, typed, as ``eval.json`` stores them and the reports read them
"""

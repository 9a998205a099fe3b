"""The lm-evaluation-harness bridge: any lm-eval task before and after an edit, compared item by item.

Modules:
    config      ``LMEvalConfig`` and the model's name
    arms        the edit a run applies: its units resolved and checked, one arm per recipe
    model       the ``probe-edited`` lm-eval model: lm-eval's ``hf`` model with the toolkit's edits applied
    tasks       task folders as code: what a local task may run, checked before it loads; its templates sandboxed
    estimate    how long the passes take on a CPU, said when they start
    run         ``run_lmeval``
    compare     paired statistics per item
    report      ``lmeval_report.json``, ``lmeval_report.md`` and ``lmeval_items.jsonl``
"""

"""The lm-evaluation-harness bridge: any lm-eval task before and after an edit, compared item by item.

Modules: ``config`` (``LMEvalConfig`` and the model's name), ``arms`` (the edit a run applies), ``model`` (the
``probe-edited`` lm-eval model), ``run`` (``run_lmeval``), ``compare`` (paired statistics per item), ``report``.
"""

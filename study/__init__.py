"""The replication study of the paper's §7: a run directory read as records, verdicts, the report, and its plan.

Modules: ``layout`` (what the study adds to a run directory), ``records`` (the run as the report reads it, and the
commands that add each part), ``gather`` (reading it), ``verdicts`` and ``evidence`` (the rules and what they read),
``figures``, ``page`` and ``report_html`` (the self-contained HTML page), ``replicate_config``, ``replicate``,
``replicate_checks`` and ``replicate_estimate`` (``probe replicate``'s stages, what is done, what it will cost).
"""

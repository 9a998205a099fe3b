"""The replication study of the paper's §7: a run directory read as records, verdicts, the report, and its plan.

Modules:
    layout              what the study adds to a run directory
    stored              the replicate record and the evaluation as the study reads them
    records, gather     the run as the report reads it, and the commands that add each part; reading it
    verdicts, evidence  the rules, fixed before any result is read, and what they read
    claims              the claim registry: each claim, the rule that judges it, its section of the page
    figures, page       the report's figures; the page it is written on
    report_html         the self-contained HTML report
    replicate_config    ``probe replicate``'s options
    replicate           its stages, each resuming where it stopped
    replicate_checks    which stages are complete in a run directory
    replicate_estimate  what each stage will cost, before anything runs
    floors              what each stage cost beside its weight-FLOP floor, and the time budgets
"""

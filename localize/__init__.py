"""Where the change lives: faithfulness curves over k, a causal layer and component profile, relevance patching.

``probe localize RUN -c CAP`` asks where SFT -> DPO put the change that moves the model's output: how many units of a
hook point it takes to close the teacher-forced KL gap (MIB's faithfulness f(k), in both directions), which ranking
finds them fastest, and which layers, sub-layers and heads carry it. docs/localize.md has the method, the verdict
rules and the measured tables.

Modules:
    config      LocalizeConfig: the options, checked before anything loads
    grid        the k grid: shares of a hook point's units or unit counts
    plan        every input resolved and checked before a model loads (the run, the pair, the rows, the output)
    rankings    the rankings compared (the table), their scores and unit orders
    passes      the two directions, unit sets and arms, and one shared engine call per direction
    sequential  the placebo band's stopping rule: draw random sets until the ranking verdict can no longer change
    band        the placebo band's passes: every set, or wave by wave by the sequential rule
    profile     the layer and component profile's arms (sub-layers, windows, heads)
    responses   each direction's teacher-forced rows (the target's greedy responses by default)
    estimate    the cost said before the run starts
    summaries   f(k) with CIs, CPR and CMD, k50/k80, the placebo band, estimated vs true
    verdicts    the ranking verdict and claim 1c, rules fixed before any default-pair result
    measured    what the passes measured, handed to assemble
    assemble    from the passes to the report
    records     the records of localize.json
    figures     the curves and the profile (Plotly)
    page        localize.json, localize.html and the printed tables
    parallel    torchrun: the rows split over processes, their measurements joined
    run         localize(): the library call behind the command
"""

"""The model-access layer: everything that touches a model's forward, above :mod:`core` and below every stage.

Modules:
    hook_points            one row per hook point, the family table, one path resolver, and how to attach
    pair                   an SFT/DPO pair loaded and checked for comparable activations
    batches                the tensors one forward takes
    units, factors         neuron sets (units of a hook point) and their checks; scaling factors
    drivers/               torch and nnsight capture and edit, TransformerLens captures
    edits, sites, scaling  edit kinds as data, the site kernels they are built from, no-op checks per dtype
    lockstep, placebo      a patch source run in lockstep with its target; matched random unit sets
    generation             one Generator renders, batches, stops and seeds generation for every stage
    edited_generation      generation with edits applied by an editing driver
    shared_generation      many greedy arms of one model decoded in shared batches
    relevance              every unit's estimated effect on the KL gap: the gradient and relevance patching (RelP)
    joint_patch            a patch of units at several hook points with one source
"""

"""The model-access layer: everything that touches a model's forward, above :mod:`core` and below every stage.

Modules:
    hook_table          one row per hook point (torch-free)
    hook_points         the family table, one path resolver, and how to attach a hook point
    pair                an SFT/DPO pair loaded and checked for comparable activations
    batches             the tensors one forward takes
    units               neuron sets (units of a hook point) and their checks
    factors             scaling factors and their checks
    directions          the local basis's directions (whose blocks on whose inputs)
    driver_table        the ways into a model, by name (torch-free)
    drivers/            torch and nnsight capture and edit, TransformerLens captures
    edits               edit kinds as data, compiled to site functions
    sites               the site kernels edits are built from
    scaling             no-op checks of a scaling per dtype
    lockstep            a patch source run in lockstep with its target
    latent_edits        the latent patch: a dictionary's latents carried from one model into the other
    placebo             matched random unit sets
    amplify             amplification: weight blends in place, logits amplified against a source's
    generation          one Generator renders, batches, stops and seeds generation for every stage
    edited_generation   generation with edits applied by an editing driver (the per-arm engine)
    stack               one stack under every engine: the decoder walked block by block, batching, what it runs
    attention           the walk's attention: the model's own, sdpa reading grouped key/value heads in place (CPU)
    packed_rows         a prompt pass over its real tokens only: padding skips every product (CPU, exact)
    kv_cache            the stack's key/value caches: growing in place, seeded from stems, joined, rows selected
    stems               prompts that begin alike batched around their shared stem
    decode_batch        shared decoding's batch state: rows, groups, forks, finished rows
    shared_sites        each pass's site functions on its own rows, patch sources once per group
    decode_step         one batch of prompts decoded greedily for a chunk of passes
    joint_steps         shared decoding's steps of several batches as one forward, attention per batch
    packed_linear       greedy decoding's matrix products on weights packed once for oneDNN (CPU, float32)
    shared_generation   many greedy arms of one model decoded in shared batches (SharedDecoder)
    forced              teacher-forced sequences, their scores, and the per-arm engine (whole forwards)
    forced_passes       teacher-forced prompt batches: prompts once for all their responses, patch sources once
    forced_shared       the shared teacher-forced engine: arms from their fork layer
    outcomes            continuous outcomes of an edit (KL to the other checkpoint, log-probs, DPO margins)
    local_blocks        one model's block run on the other model's input to it (the local basis)
    relevance           every unit's estimated effect on the KL gap: the gradient and relevance patching (RelP)
    joint_patch         a patch of units at several hook points with one source
"""

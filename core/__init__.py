"""The shared core below every other room.

``core`` holds what every room needs and no room owns, so that each thing has one
source. The rooms import from here and from the rooms before them, never the other way
round (core ← access ← judging ← data_synthesis ← training ← probes ← analysis ← interventions ← dictionary ← lmeval
← study ← probe_cli; ``tests/test_import_graph.py`` holds them to it). The LLM client and the judges have a room of
their own, :mod:`judging` (docs/extending.md, "Where a new piece goes").

Modules:
    errors, paths, inputs, atomic   one-line errors, output-path checks, the JSON/JSONL reader, atomic writes
    schema, capabilities, rows      the RoleMRC row types, the 18 tasks → 5 capabilities, the row files
    constraints                     the 18 offline checkers of a reply's verifiable constraints
    records, validation             the one codec of every stored record (dataclass <-> JSON, typed and versioned); the
                                    one check of values against type hints, which it and ``--config`` files share
    hdf5                            HDF5 files other than a run's activations: written whole, read through one check
    run_dir, locks                  the run directory's layout (every file name in it), the one file lock
    home, builds, provenance        the toolkit home, cached builds, hashing and the one weights fingerprint
    pair_dirs                       where a pair's SFT, DPO and base models are (``--sft``, ``--dpo``, ``--base``)
    chat, templates, sandbox        chat rendering, known templates, the bounded Jinja sandbox templates run in
    models, devices                 model and tokenizer loading and checks; ``--device`` checked against the machine
    decoding, budget, pace          how responses are decoded; how many tokens one forward may hold; the measured pace
                                    every stage estimates its time from
    progress                        a long stage's progress, on a terminal and in a log
    clock, flops                    the seconds a stage spends generating and teacher-forcing; its weight FLOPs and
                                    this machine's rate for them (each stage's floor)
    stats                           McNemar, Wilson, bootstrap
    config_file, config_fields      ``--config FILE`` for every command; what a config field says about itself
    config_init                     a config that nests others takes their settings by their flat names
"""

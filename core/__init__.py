"""The shared core below the five pipeline stages.

``core`` holds what every stage needs and no stage owns, so that each thing has one
source. Stages import from here and from earlier stages' outputs, never the other way
round (core ← access ← data_synthesis ← training ← probes ← analysis ← interventions ← lmeval ← study ← CLI).

Modules:
    errors, paths, inputs, atomic   one-line errors, output-path checks, the JSON/JSONL reader, atomic writes
    schema, capabilities, rows      the RoleMRC row types, the 18 tasks → 5 capabilities, the row files
    records                         the one codec of every stored record: dataclass <-> JSON, typed and versioned
    run_dir, locks                  the run directory's layout (every file name in it), the one file lock
    home, builds, provenance        the toolkit home, cached builds, hashing and the one weights fingerprint
    chat, templates, models         chat rendering, known templates, model and tokenizer loading
    decoding, budget                how responses are decoded; how many tokens one forward may hold
    stats                           McNemar, Wilson, bootstrap
    config_file                     ``--config FILE`` for every command
    llm, judges                     the OpenAI-compatible client; the judges and the judge factory
"""

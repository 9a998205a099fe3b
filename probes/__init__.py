"""Hook-based recording of an SFT/DPO pair's activations into one HDF5 file per run.

Entry points: :class:`probes.config.RecordConfig` and :func:`probes.recording.record_run`
(what ``probe run`` calls); :func:`access.pair.load_pair`; the backends in
:mod:`access.drivers`; the file layout and reader in :mod:`probes.store`; crash safety in
:mod:`probes.journal`. Submodules are imported explicitly, so ``import probes`` stays cheap.

Modules:
    config, settings        the recording's settings, validated; the run's settings as one typed, versioned record
    prompts, samples        a capability's test rows as the token ids the models saw in training; per-sample columns
    responses               teacher-forced replies to record on (``--position response_mean|response_last``)
    batching                which prompts share a forward: batches filled up to a padded-token budget
    recording               ``record_run``: both (or three) models' activations on each capability's prompts
    journal, store          per-batch shards consolidated atomically; the run's HDF5 file and its reader
    distributed             data parallelism: one recorder per process, coordinated through torch.distributed
    attribution             gradient attribution of a metric *m* to every DPO unit, per prompt
    outcome_rows            which response tokens the continuous outcomes teacher-force, and the DPO pairs they score
"""

"""Hook-based recording of an SFT/DPO pair's activations into one HDF5 file per run.

Entry points: :class:`probes.config.RecordConfig` and :func:`probes.recording.record_run`
(what ``probe run`` calls); :func:`access.pair.load_pair`; the backends in
:mod:`access.drivers`; the file layout and reader in :mod:`probes.store`; crash safety in
:mod:`probes.journal`. Submodules are imported explicitly, so ``import probes`` stays cheap.
"""

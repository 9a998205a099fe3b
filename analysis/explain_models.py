"""The checkpoints an explanation reads: exactly the run's two models, and their base where it can be found.

A run names its models by directory *and* by weights fingerprint
(:func:`core.provenance.weights_sha256`, ``models/{sft,dpo}`` of the recording). A card
that read other weights than the activations came from would explain another model, so
:func:`open_models` refuses, each in one line: a model directory that is gone (``--sft`` /
``--dpo`` say where it is now), one whose weights are not the recorded ones, and a pair (or
a given ``--base``) whose shapes differ. The base of the pair is the SFT model's parent as
its ``provenance.json`` records it (:mod:`training.provenance`), used only when that
directory is still there with the recorded fingerprint; otherwise base → SFT is skipped and
a note says why.

Example:
    >>> import tempfile
    >>> from probes.settings import RunSettings
    >>> from probes.store import RunWriter
    >>> run_dir = Path(tempfile.mkdtemp())   # a run that recorded its models in directories since removed
    >>> RunWriter(run_dir, RunSettings(sft_dir="/gone/sft", dpo_dir="/gone/dpo")).close()
    >>> with RunReader(run_dir) as run, open_models(run):
    ...     pass
    Traceback (most recent call last):
    core.errors.ProbeError: ...: its sft model /gone/sft is missing (the run recorded it there); pass --sft DIR ...
    >>> with RunReader("runs/latest") as run, open_models(run) as models:      # doctest: +SKIP
    ...     models.base is not None, models.fingerprints()["dpo"]["weights_sha256"][:8]
    (True, '725cde8b')
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from analysis.checkpoint import Checkpoint, check_same_shape
from core.errors import ProbeError
from core.pair_dirs import PairDirs
from core.provenance import weights_sha256
from probes.store import RunReader


@dataclass
class ModelSet:
    """The verified checkpoints (``base`` None when there is none to use) and what was noted on the way."""

    sft: Checkpoint
    dpo: Checkpoint
    base: Checkpoint | None
    hashes: dict[str, str]
    notes: list[str] = field(default_factory=list)

    def fingerprints(self) -> dict[str, dict[str, str]]:
        """role -> {dir, weights_sha256}, for the records."""
        roles = {"sft": self.sft, "dpo": self.dpo, **({"base": self.base} if self.base else {})}
        return {role: {"dir": str(c.dir.resolve()), "weights_sha256": self.hashes[role]} for role, c in roles.items()}


@contextmanager
def open_models(run: RunReader, dirs: PairDirs | None = None) -> Iterator[ModelSet]:
    """The run's SFT and DPO checkpoints, checked (module doc), and the base, open for the block; ``dirs``: where
    they are now, when not where the run recorded them."""
    dirs = dirs or PairDirs()
    with ExitStack() as stack:
        paths = {m: _recorded_dir(run, m, given) for m, given in (("sft", dirs.sft_dir), ("dpo", dirs.dpo_dir))}
        sft = stack.enter_context(Checkpoint(paths["sft"], "--sft"))
        dpo = stack.enter_context(Checkpoint(paths["dpo"], "--dpo"))
        check_same_shape(sft, dpo)
        hashes = {m: _check_fingerprint(run, m, paths[m]) for m in ("sft", "dpo")}
        notes: list[str] = []
        base = _base(sft, dirs.base_dir, notes, stack, hashes)
        yield ModelSet(sft, dpo, base, hashes, notes)


def _recorded_dir(run: RunReader, model: str, given: str | Path | None) -> Path:
    """Where the model is: ``given``, else the directory the run recorded; one line when it is not there."""
    if given is not None:
        path = Path(given)
        if not path.is_dir():
            raise ProbeError(f"--{model} {path}: no such directory; expected the {model} model the run recorded")
        return path
    recorded = str(run.model_info(model).get("model_dir") or run.settings.model_dir(model) or "")
    if not recorded:
        raise ProbeError(
            f"{run.path}: the run does not record where its {model} model is; "
            f"pass --{model} DIR (the model it recorded)"
        )
    path = Path(recorded)
    if not path.is_dir():
        raise ProbeError(
            f"{run.run_dir}: its {model} model {path} is missing (the run recorded it there); pass --{model} DIR "
            "where it is now"
        )
    return path


def _check_fingerprint(run: RunReader, model: str, path: Path) -> str:
    recorded = str(run.model_info(model).get("weights_sha256") or "")
    if not recorded:
        raise ProbeError(
            f"{run.path}: the run records no weights fingerprint for its {model} model, so no checkpoint can be "
            "shown to be the one it recorded; record the run again with `probe run`"
        )
    actual = weights_sha256(path)
    if actual != recorded:
        raise ProbeError(
            f"--{model} {path}: its weights are not the ones the run recorded (weights_sha256 {actual[:12]}…, "
            f"the run has {recorded[:12]}…); explain reads only the models a run recorded"
        )
    return actual


def _base(
    sft: Checkpoint, given: str | Path | None, notes: list[str], stack: ExitStack, hashes: dict[str, str]
) -> Checkpoint | None:
    """``--base`` (checked for shape), else the SFT model's recorded parent when it is intact, else None with a note."""
    from training.provenance import read_provenance

    provenance = read_provenance(sft.dir)
    parent = provenance.parent if provenance is not None else {}
    recorded_hash = str(parent.get("weights_sha256") or "")
    if given is not None:
        base = stack.enter_context(Checkpoint(Path(given), "--base"))
        check_same_shape(base, sft)
        hashes["base"] = weights_sha256(base.dir)
        if recorded_hash and hashes["base"] != recorded_hash:
            notes.append(
                f"--base {given}: its weights are not the parent that {sft.dir}/provenance.json records; base → SFT "
                "compares them anyway, as asked"
            )
        return base
    named = parent.get("base")
    if not named:
        notes.append(f"no base → SFT weight change: {sft.dir} records no base model (provenance.json); pass --base DIR")
        return None
    path = Path(str(named))
    if not path.is_dir() or not recorded_hash or weights_sha256(path) != recorded_hash:
        why = (
            "is not a directory here"
            if not path.is_dir()
            else "holds other weights than the SFT model's provenance records"
        )
        notes.append(f"no base → SFT weight change: the recorded base {path} {why}; pass --base DIR")
        return None
    base = stack.enter_context(Checkpoint(path, "--base"))
    try:
        check_same_shape(base, sft)
    except ProbeError as exc:
        notes.append(f"no base → SFT weight change: {exc}")
        return None
    hashes["base"] = recorded_hash
    return base

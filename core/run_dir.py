"""The run directory's layout: every file and folder name in it is spelled here, and nowhere else.

::

    RUN_DIR/
      activations.h5                     the recording (probes.store)
      run.json                           {"settings": ...}, written before the first batch (probes.journal)
      journal/<capability>/<start>.npz   one shard per recorded batch, until consolidated; <start> has 9 digits
      .lock                              held while recording: a second recorder is refused
      .consolidate/                      the next activations.h5, while it is written
      attribution_<m>.h5                 attribution scores per objective m (probes.attribution), a cache
      analysis/                          AnalysisDir: probe analyze and probe explain (--out puts it elsewhere)
      interventions/<capability>_<model>_<time>/   InterventionDir: one probe intervene (--out puts it elsewhere)
      lmeval/<time>/                     LMEvalDir: one probe lmeval (--out puts it elsewhere)
      localize/<capability>_<hook>_<time>/   LocalizeDir: one probe localize (--out puts it elsewhere)
      eval.json, replicate.json, report.html       probe models eval --out, probe replicate, probe report

    analysis/
      summary.json                       the analysis (analysis.summary)
      maps_<metric>.h5                   the metric maps (analysis.maps)
      maps_<metric>_sft_minus_base.h5    the same for SFT − base, in a run recorded with --base
      neurons_<capability>_<hook>.json   the selected neuron set (access.units)
      plots/                             <capability>_<hook>_<metric>_maps.html and the other figures
      top<k>/                            a ranking of k units made for probe intervene (an AnalysisDir)
      weight_change.h5                   probe explain: the weight change per unit (analysis.weight_change)
      explain_<capability>_<hook>.json|.html   probe explain: the record and its cards

    interventions/<name>/
      ab_report.json, ab_report.md, generations.jsonl   the A/B report (interventions.report)
      .arms/                             finished arms, for a resume (interventions.arms)

    lmeval/<time>/
      lmeval_report.json, lmeval_report.md, lmeval_items.jsonl   the benchmark report (lmeval.report)

    localize/<name>/
      localize.json, localize.html       faithfulness curves, the layer profile and the verdicts (localize.report)

A dataset folder (``probe synthesize --out``, the default pair's ``data/``) is a :class:`DataDir`:
``sft.jsonl``, ``dpo.jsonl``, ``test.jsonl``, and from the offline synthesizer ``profiles.jsonl`` and
``passages.jsonl``; the default pair keeps its unshaped DPO rows as ``dpo_full.jsonl``.

Every name is the one older toolkit versions wrote, so old run directories keep opening
(``tests/test_run_dir.py`` pins them). A stage
takes its paths from :class:`RunDir`, :class:`AnalysisDir`, :class:`InterventionDir`, :class:`LMEvalDir` or
:class:`DataDir` and builds none itself; what a file holds is documented by the module that writes it.

Example:
    >>> run = RunDir("runs/demo")
    >>> str(run.analysis.neuron_set("multi_turn", "mlp_out"))
    'runs/demo/analysis/neurons_multi_turn_mlp_out.json'
    >>> run.shard("multi_turn", 64).relative_to(run.root).as_posix()
    'journal/multi_turn/000000064.npz'
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.atomic import write_atomic
from core.errors import ProbeError
from core.inputs import read_json
from core.locks import LockHeld, file_lock

__all__ = [
    "ACTIVATIONS_FILE",
    "JOURNAL_DIR",
    "RUN_JSON",
    "SHARD_NAME",
    "AnalysisDir",
    "DataDir",
    "InterventionDir",
    "LMEvalDir",
    "LocalizeDir",
    "RunDir",
]

ACTIVATIONS_FILE = "activations.h5"
RUN_JSON = "run.json"
JOURNAL_DIR = "journal"
SHARD_NAME = re.compile(r"^[0-9]{9}\.npz$")


class AnalysisDir:
    """The files of one analysis: ``RUN_DIR/analysis`` or wherever ``--out`` put it (see the module doc)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def maps(self, metric: str) -> Path:
        return self.root / f"maps_{metric}.h5"

    def base_maps(self, metric: str) -> Path:
        return self.root / f"maps_{metric}_sft_minus_base.h5"

    def neuron_set(self, capability: str, hook: str) -> Path:
        return self.root / f"neurons_{capability}_{hook}.json"

    def top(self, k: int) -> AnalysisDir:
        return AnalysisDir(self.root / f"top{k}")

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    def maps_plot(self, capability: str, hook: str, metric: str) -> Path:
        """The heatmap page of one capability and hook (a PNG of the same stem beside it when exported)."""
        return self.plots / f"{capability}_{hook}_{metric}_maps.html"

    @property
    def weight_change(self) -> Path:
        return self.root / "weight_change.h5"

    def explain_record(self, capability: str, hook: str) -> Path:
        return self.root / f"explain_{capability}_{hook}.json"

    def explain_page(self, capability: str, hook: str) -> Path:
        return self.explain_record(capability, hook).with_suffix(".html")

    def explain_records(self, capability: str) -> Iterator[Path]:
        """Every explain record of ``capability`` here, whatever its hook."""
        return self.root.glob(self.explain_record(capability, "*").name)


class InterventionDir:
    """The files of one A/B run: ``RUN_DIR/interventions/<name>`` or wherever ``--out`` put it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def report(self) -> Path:
        return self.root / "ab_report.json"

    @property
    def markdown(self) -> Path:
        return self.root / "ab_report.md"

    @property
    def generations(self) -> Path:
        return self.root / "generations.jsonl"

    @property
    def arms(self) -> Path:
        return self.root / ".arms"

    def responses(self, model: str) -> Path:
        """``model``'s greedy baseline token ids, as ``--responses FILE`` reads them (the continuous outcomes)."""
        return self.root / f"responses_{model}.jsonl"


class LMEvalDir:
    """The files of one ``probe lmeval`` report: ``RUN_DIR/lmeval/<time>`` or wherever ``--out`` put it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def report(self) -> Path:
        return self.root / "lmeval_report.json"

    @property
    def markdown(self) -> Path:
        return self.root / "lmeval_report.md"

    @property
    def items(self) -> Path:
        return self.root / "lmeval_items.jsonl"


class LocalizeDir:
    """The files of one ``probe localize``: ``RUN_DIR/localize/<name>`` or wherever ``--out`` put it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def report(self) -> Path:
        return self.root / "localize.json"

    @property
    def page(self) -> Path:
        return self.root / "localize.html"


class DataDir:
    """A dataset folder: the split files by name (``SFT``, ``DPO``, ``TEST``, ...) and as paths under ``root``.

    >>> DataDir("data").test.as_posix(), DataDir.SPLITS
    ('data/test.jsonl', ('sft.jsonl', 'dpo.jsonl', 'test.jsonl'))
    """

    SFT = "sft.jsonl"
    DPO = "dpo.jsonl"
    TEST = "test.jsonl"
    PROFILES = "profiles.jsonl"  # the offline synthesizer's role profiles
    PASSAGES = "passages.jsonl"  # and its passages
    DPO_FULL = "dpo_full.jsonl"  # the default pair's DPO rows before its recipe shapes them
    HELDOUT = "heldout.jsonl"  # the held-out evaluation split (data_synthesis.heldout), never trained on
    SPLITS: tuple[str, ...] = (SFT, DPO, TEST)

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def sft(self) -> Path:
        return self.root / self.SFT

    @property
    def dpo(self) -> Path:
        return self.root / self.DPO

    @property
    def test(self) -> Path:
        return self.root / self.TEST

    @property
    def dpo_full(self) -> Path:
        return self.root / self.DPO_FULL


class RunDir:
    """One run directory's paths, its recording lock, its settings file and its journal of shards (module doc)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    # --- the recording ---------------------------------------------------------------------------------------------

    @property
    def activations(self) -> Path:
        return self.root / ACTIVATIONS_FILE

    @property
    def settings_file(self) -> Path:
        return self.root / RUN_JSON

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL_DIR

    @property
    def consolidating(self) -> Path:
        """Where the next ``activations.h5`` is written before it is renamed over the old one."""
        return self.root / ".consolidate"

    def attribution(self, objective: str) -> Path:
        return self.root / f"attribution_{objective}.h5"

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the recording lock (the directory is created); a second recorder is refused in one line."""
        try:
            with file_lock(self.root / ".lock", wait=False):
                yield
        except LockHeld:
            raise ProbeError(
                f"{self.root}: another `probe run` is recording into this directory; wait for it or use another --out"
            ) from None

    def read_settings_file(self) -> dict[str, Any] | None:
        """``run.json`` as a JSON object whose ``settings`` is an object, or None when there is none."""
        path = self.settings_file
        if not path.is_file():
            return None
        body = read_json(path, f"run record ({RUN_JSON})")
        if not isinstance(body, dict) or not isinstance(body.get("settings"), dict):
            found = (
                type(body).__name__
                if not isinstance(body, dict)
                else "no 'settings' object"
                if "settings" not in body
                else f"'settings' holding {type(body['settings']).__name__}"
            )
            raise ProbeError(
                f"{path}: expected a JSON object with a 'settings' object (the run's settings), found {found}; "
                "was it edited by hand? Restore it or record into a new --out"
            )
        return body

    def write_settings_file(self, settings: dict[str, Any]) -> None:
        """Write ``run.json`` atomically: ``{"settings": settings}``."""
        write_atomic(self.settings_file, json.dumps({"settings": settings}, indent=2, sort_keys=True).encode())

    # --- the journal -----------------------------------------------------------------------------------------------

    def shard(self, capability: str, start: int) -> Path:
        """The shard of the batch of ``capability`` that starts at prompt ``start``."""
        return self.journal / capability / f"{start:09d}.npz"

    def shards(self, capability: str) -> list[Path]:
        """Complete shards of a capability in batch order; a ``.npz`` not named as a shard is refused."""
        folder = self.journal / capability
        if not folder.is_dir():
            return []
        found = sorted(folder.glob("*.npz"))
        stray = [p for p in found if not SHARD_NAME.match(p.name)]
        if stray:
            raise ProbeError(
                f"{stray[0]}: not a journal shard name (expected <batch start>.npz with nine digits, e.g. "
                f"000000064.npz); the journal holds only shards: move the file out of {folder}"
            )
        return sorted(found, key=lambda p: int(p.stem))

    def shard_count(self) -> int:
        """Shards of every capability in the journal (recorded batches not yet consolidated)."""
        return sum(1 for _ in self._all_shards())

    def has_recordings(self) -> bool:
        """Whether anything was recorded here: a consolidated file or at least one shard."""
        return self.activations.is_file() or any(self._all_shards())

    def _all_shards(self) -> Iterator[Path]:
        return self.journal.glob("*/*.npz")

    def remove_stale_temp(self) -> None:
        """Delete half-written shards of a killed recorder; only under the lock, before recording."""
        for tmp in self.journal.glob("*/.*.tmp"):
            tmp.unlink(missing_ok=True)

    # --- what later stages add -------------------------------------------------------------------------------------

    @property
    def analysis(self) -> AnalysisDir:
        return AnalysisDir(self.root / "analysis")

    @property
    def interventions(self) -> Path:
        return self.root / "interventions"

    def intervention(self, name: str) -> InterventionDir:
        return InterventionDir(self.interventions / name)

    @property
    def lmeval(self) -> Path:
        return self.root / "lmeval"

    @property
    def localize(self) -> Path:
        return self.root / "localize"

    def intervention_reports(self) -> list[Path]:
        """The A/B reports under ``interventions/`` (one through a link such as ``latest`` too), by folder name."""
        if not self.interventions.is_dir():
            return []
        found = (InterventionDir(p).report for p in sorted(self.interventions.iterdir()))
        return [report for report in found if report.is_file()]

    @property
    def eval_file(self) -> Path:
        return self.root / "eval.json"

    @property
    def replicate_file(self) -> Path:
        return self.root / "replicate.json"

    @property
    def report_file(self) -> Path:
        return self.root / "report.html"

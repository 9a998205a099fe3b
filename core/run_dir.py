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
      local/                             probe analyze --basis local, by default (an AnalysisDir)
      weight_change.h5                   probe explain: the weight change per unit (analysis.weight_change)
      explain_<capability>_<hook>.json|.html   probe explain: the record and its cards

    interventions/<name>/
      ab_report.json, ab_report.md, generations.jsonl   the A/B report (interventions.report)
      responses_<model>.jsonl            a model's greedy token ids, for --outcomes only (interventions.outcomes)
      .arms/                             finished arms, for a resume (interventions.arms)
      lmeval_report.*, lmeval_items.jsonl   probe lmeval --ab-report: its report beside the A/B report

    lmeval/<time>/
      lmeval_report.json, lmeval_report.md, lmeval_items.jsonl   the benchmark report (lmeval.report)

    localize/<name>/
      localize.json, localize.html       faithfulness curves, the layer profile and the verdicts (localize.report)

A dataset folder (``probe synthesize --out``, the default pair's ``data/``) is a :class:`DataDir`:
``sft.jsonl``, ``dpo.jsonl``, ``test.jsonl``, and from the offline synthesizer ``profiles.jsonl`` and
``passages.jsonl``; the default pair keeps its unshaped DPO rows as ``dpo_full.jsonl``.

Each name in a run, analysis, A/B or lm-eval folder (a *results folder*, known by the files that say
what it is) is listed with the commands that write it in :data:`RESULTS_FOLDERS`;
:func:`results_place` says where any path falls, and :mod:`core.paths` refuses an output path at a
place of another command, so that no command overwrites another's results.

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
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from core.atomic import write_atomic
from core.errors import ProbeError
from core.inputs import read_json
from core.locks import LockHeld, file_lock

__all__ = [
    "ACTIVATIONS_FILE",
    "JOURNAL_DIR",
    "RESULTS_FOLDERS",
    "RUN_JSON",
    "SHARD_NAME",
    "AnalysisDir",
    "DataDir",
    "FolderKind",
    "InterventionDir",
    "LMEvalDir",
    "LocalizeDir",
    "Place",
    "ResultsPlace",
    "RunDir",
    "Writer",
    "results_below",
    "results_folder_kind",
    "results_place",
]

ACTIVATIONS_FILE = "activations.h5"
RUN_JSON = "run.json"
JOURNAL_DIR = "journal"
SHARD_NAME = re.compile(r"^[0-9]{9}\.npz$")
TOP_FOLDER = "top{k}"  # AnalysisDir.top: a ranking of k units made for probe intervene


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
        return AnalysisDir(self.root / TOP_FOLDER.format(k=k))

    @property
    def local(self) -> AnalysisDir:
        """Where ``probe analyze --basis local`` puts its analysis by default, beside the global one."""
        return AnalysisDir(self.root / "local")

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


class DictionaryDir:
    """The files of one ``probe dictionary`` folder, wherever ``--out`` put it: one harvested store, and a set of
    files per kind of dictionary trained on it (``kind``: ``crosscoder``, ``diff-sae``; ``null`` has weights only), so
    that a second ``--kind`` into the same folder reuses the store and keeps the first kind's results.

    >>> files = DictionaryDir("out")
    >>> [p.name for p in (files.summary("diff-sae"), files.latents("diff-sae"), files.page("diff-sae"))]
    ['summary_diff-sae.json', 'latents_diff-sae.json', 'dictionary_diff-sae.html']
    >>> files.weights("null").as_posix()
    'out/null.pt'
    """

    LEGACY = ("summary.json", "latents.json", "dictionary.html")  # one kind's files, before 2026-11-30

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def summary(self, kind: str) -> Path:
        return self.root / f"summary_{kind}.json"

    def latents(self, kind: str) -> Path:
        return self.root / f"latents_{kind}.json"

    def page(self, kind: str) -> Path:
        return self.root / f"dictionary_{kind}.html"

    def weights(self, kind: str) -> Path:
        """The trained dictionary, with the settings it was trained with (``dictionary.run._trained``)."""
        return self.root / f"{kind}.pt"

    @property
    def store(self) -> Path:
        """The harvested activations (:class:`dictionary.store.Store`)."""
        return self.root / "store"

    @property
    def store_manifest(self) -> Path:
        return self.store / "store.json"


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

    @property
    def lock_file(self) -> Path:
        return self.root / ".lock"

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the recording lock (the directory is created); a second recorder is refused in one line."""
        try:
            with file_lock(self.lock_file, wait=False):
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

    def analyses(self) -> list[AnalysisDir]:
        """The default analysis folder, then every other ``analysis*`` folder beside it, by name (those that exist)."""
        first = self.analysis.root
        others = sorted(p for p in self.root.glob(f"{first.name}*") if p != first)
        return [AnalysisDir(p) for p in [first, *others] if p.is_dir()]

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


# --- who writes what: the results folders' places, for the one check of an output path (core.paths) ---------------


class Writer:
    """The commands that write results folders, as the command line spells them (the ``writer`` of
    :func:`core.paths.check_output_dir` and :func:`core.paths.check_output_file`; other commands name themselves)."""

    RUN = "probe run"
    ANALYZE = "probe analyze"
    EXPLAIN = "probe explain"
    INTERVENE = "probe intervene"
    LMEVAL = "probe lmeval"
    EVAL = "probe models eval"
    REPLICATE = "probe replicate"
    REPORT = "probe report"
    DICTIONARY = "probe dictionary"
    LOCALIZE = "probe localize"
    JUDGE = "probe judge"  # the commands below write no results folder: every place of one is refused to them
    SYNTHESIZE = "probe synthesize"
    TRAIN = "probe train"
    MODELS = "probe models"


@dataclass(frozen=True)
class Place:
    """A name in a results folder (a glob), what it holds and the commands that write it; ``tree``: a folder, with
    everything below it."""

    name: str
    what: str
    writers: tuple[str, ...]
    tree: bool = False


@dataclass(frozen=True)
class FolderKind:
    """A kind of results folder: the names whose presence makes a folder one, the commands whose output folder it
    is, its places, and the folders of a kind it holds (``(glob path, kind key)``)."""

    name: str
    markers: tuple[str, ...]
    writers: tuple[str, ...]
    places: tuple[Place, ...]
    folders: tuple[tuple[str, str], ...] = ()
    article: str = "a"

    @property
    def one(self) -> str:
        """'an analysis folder'."""
        return f"{self.article} {self.name}"


@dataclass(frozen=True)
class ResultsPlace:
    """Where a path falls among the results folders: ``place`` in ``folder``, a folder of ``kind`` (``place`` None:
    the path is that folder; ``inside``: below the folder ``place``). ``found`` is the results folder of
    ``found_kind`` recognised by its file ``marker``, at or above ``folder``, whose layout led there."""

    found: Path
    found_kind: FolderKind
    marker: str
    folder: Path
    kind: FolderKind
    place: Place | None = None
    inside: bool = False

    @property
    def writers(self) -> tuple[str, ...]:
        """The commands that may write this path."""
        return self.place.writers if self.place is not None else self.kind.writers

    def describe(self) -> str:
        """'is the run record of the run folder runs/x, written by probe run' and the like."""
        by = f"written by {' and '.join(self.writers)}"
        if self.place is not None:
            return f"is {'in ' if self.inside else ''}{self.place.what} of the {self.kind.name} {self.folder}, {by}"
        if self.folder == self.found:
            return f"is {self.kind.one} (it holds {self.marker}), {by}"
        return f"is where the {self.found_kind.name} {self.found} keeps {self.kind.one}, {by}"


def _kinds() -> dict[str, FolderKind]:
    """The results folders' layout, from the names above (module doc), so that each is spelled once."""
    lm = LMEvalDir("")
    return {
        "run": _run_folder(),
        "ab": _ab_folder(),
        "lmeval": FolderKind(
            "lm-eval folder", (lm.report.name, lm.items.name), (Writer.LMEVAL,), _lm_places(), article="an"
        ),
        "dictionary": _dictionary_folder(),  # before "analysis": it holds a summary.json too
        "localize": _localize_folder(),
        "analysis": _analysis_folder(),
    }


def _run_folder() -> FolderKind:
    run, w = RunDir(""), Writer
    return FolderKind(
        "run folder",
        (run.settings_file.name, run.activations.name),
        (w.RUN, w.REPLICATE),
        (
            Place(run.settings_file.name, "the run record", (w.RUN,)),
            Place(run.activations.name, "the recording", (w.RUN,)),
            Place(run.journal.name, "the recording's journal", (w.RUN,), tree=True),
            Place(run.consolidating.name, "the consolidation folder", (w.RUN,), tree=True),
            Place(run.lock_file.name, "the recording lock", (w.RUN,)),
            Place(run.attribution("*").name, "an attribution cache", (w.ANALYZE,)),
            Place(run.eval_file.name, "the pair's evaluation", (w.EVAL,)),
            Place(run.replicate_file.name, "the replicate record", (w.REPLICATE,)),
            Place(run.report_file.name, "the report", (w.REPORT,)),
            Place(run.interventions.name, "the folder of the A/B runs", (w.INTERVENE,)),
            Place(run.lmeval.name, "the folder of the lm-eval reports", (w.LMEVAL,)),
            Place(run.localize.name, "the folder of the localize reports", (w.LOCALIZE, w.REPLICATE)),
        ),
        (
            (run.analysis.root.as_posix(), "analysis"),
            (run.intervention("*").root.as_posix(), "ab"),
            ((run.lmeval / "*").as_posix(), "lmeval"),
            ((run.localize / "*").as_posix(), "localize"),
        ),
    )


def _lm_places() -> tuple[Place, ...]:
    """An lm-eval report's files, in an lm-eval folder or beside the A/B report it joins."""
    lm, w = LMEvalDir(""), Writer
    return (
        Place(lm.report.name, "the lm-eval report", (w.LMEVAL,)),
        Place(lm.markdown.name, "the lm-eval report's markdown", (w.LMEVAL,)),
        Place(lm.items.name, "the lm-eval items file", (w.LMEVAL,)),
    )


def _ab_folder() -> FolderKind:
    ab, w = InterventionDir(""), Writer
    return FolderKind(
        "A/B folder",
        (ab.report.name, ab.generations.name, ab.arms.name),
        (w.INTERVENE, w.LMEVAL),  # probe lmeval --ab-report puts its report beside the A/B report
        (
            Place(ab.report.name, "the A/B report", (w.INTERVENE,)),
            Place(ab.markdown.name, "the A/B report's markdown", (w.INTERVENE, w.LMEVAL)),
            Place(ab.generations.name, "the generations file", (w.INTERVENE,)),
            Place(ab.responses("*").name, "a model's kept greedy responses", (w.INTERVENE,)),
            Place(ab.arms.name, "the finished arms' folder", (w.INTERVENE,), tree=True),
            *_lm_places(),
        ),
        article="an",
    )


def _dictionary_folder() -> FolderKind:
    dictionary, w = DictionaryDir(""), Writer
    return FolderKind(
        "dictionary folder",
        (  # the store, and an earlier layout's names but the one that marks an analysis folder
            dictionary.store_manifest.relative_to(".").as_posix(),
            *(name for name in DictionaryDir.LEGACY if name != AnalysisDir("").summary.name),
        ),
        (w.DICTIONARY,),
        (
            Place(dictionary.summary("*").name, "a dictionary's summary", (w.DICTIONARY,)),
            Place(dictionary.latents("*").name, "a dictionary's latent records", (w.DICTIONARY,)),
            Place(dictionary.page("*").name, "a dictionary's page", (w.DICTIONARY,)),
            Place(dictionary.weights("*").name, "a trained dictionary", (w.DICTIONARY,)),
            *(Place(name, "a dictionary's file (an earlier layout)", (w.DICTIONARY,)) for name in DictionaryDir.LEGACY),
            Place(dictionary.store.name, "the harvested activations", (w.DICTIONARY,), tree=True),
        ),
    )


def _localize_folder() -> FolderKind:
    localize, w = LocalizeDir(""), Writer
    return FolderKind(
        "localize folder",
        (localize.report.name, localize.page.name),
        (w.LOCALIZE, w.REPLICATE),
        (
            Place(localize.report.name, "the localize report", (w.LOCALIZE, w.REPLICATE)),
            Place(localize.page.name, "the localize page", (w.LOCALIZE, w.REPLICATE)),
        ),
    )


def _analysis_folder() -> FolderKind:
    analysis, w = AnalysisDir(""), Writer
    return FolderKind(
        "analysis folder",
        (analysis.summary.name, analysis.weight_change.name),
        (w.ANALYZE, w.EXPLAIN),
        (
            Place(analysis.summary.name, "the analysis summary", (w.ANALYZE,)),
            Place(analysis.maps("*").name, "a metric's maps", (w.ANALYZE,)),
            Place(analysis.neuron_set("*", "*").name, "a neuron set", (w.ANALYZE,)),
            Place(analysis.plots.name, "the figures' folder", (w.ANALYZE, w.EXPLAIN), tree=True),
            Place(analysis.weight_change.name, "the weight change", (w.EXPLAIN,)),
            Place(analysis.explain_record("*", "*").name, "an explain record", (w.EXPLAIN,)),
            Place(analysis.explain_page("*", "*").name, "an explain page", (w.EXPLAIN,)),
        ),
        ((analysis.local.root.as_posix(), "analysis"), (TOP_FOLDER.format(k="[0-9]*"), "analysis")),
        article="an",
    )


RESULTS_FOLDERS = _kinds()  # by key, in the order a folder's kind is looked for


def results_folder_kind(folder: str | os.PathLike[str]) -> tuple[FolderKind, str] | None:
    """The kind of results folder ``folder`` is, and the file that says so; None for any other path."""
    if not os.path.isdir(folder):
        return None
    for kind in RESULTS_FOLDERS.values():
        marker = next((m for m in kind.markers if os.path.lexists(os.path.join(folder, m))), None)
        if marker is not None:
            return kind, marker
    return None


def results_place(path: str | os.PathLike[str]) -> ResultsPlace | None:
    """Where ``path`` (existing or not, through any link) falls among the results folders at or above it; None
    outside every one, or at a name no layout knows (a file of the user's own). The outermost folder's layout
    decides, so that a folder inside a run that holds a name of another kind (``RUN/.consolidate`` holds an
    ``activations.h5``) is still the run's; a results folder at a name its outer one does not know is its own.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> _ = (run / RUN_JSON).write_text("{}")
    >>> results_place(run / "analysis" / "summary.json").describe()
    'is the analysis summary of the analysis folder .../analysis, written by probe analyze'
    >>> results_place(run / "notes.txt") is None
    True
    """
    target = Path(path).resolve()
    for folder in reversed((target, *target.parents)):
        found = results_folder_kind(folder)
        at = (
            None
            if found is None
            else _descend(ResultsPlace(folder, *found, folder, found[0]), target.relative_to(folder).parts)
        )
        if at is not None:
            own = results_folder_kind(target) if at.place is None else None
            return at if own is None else ResultsPlace(target, *own, target, own[0])
    return None


def results_below(path: str | os.PathLike[str], limit: int = 10_000) -> Path | None:
    """The first results folder at or below the folder ``path`` (looking at ``limit`` folders at most), or None."""
    for seen, (folder, _, _) in enumerate(os.walk(path)):
        if seen >= limit:
            return None
        if results_folder_kind(folder) is not None:
            return Path(folder)
    return None


def _descend(at: ResultsPlace, parts: tuple[str, ...]) -> ResultsPlace | None:
    """The place ``parts`` names below ``at.folder``, by the layout of its kind."""
    if not parts:
        return at
    for pattern, key in at.kind.folders:
        steps = pattern.split("/")
        if len(parts) >= len(steps) and all(fnmatchcase(a, b) for a, b in zip(parts, steps, strict=False)):
            inner = replace(at, folder=at.folder.joinpath(*parts[: len(steps)]), kind=RESULTS_FOLDERS[key])
            return _descend(inner, parts[len(steps) :])
    for place in at.kind.places:
        if fnmatchcase(parts[0], place.name) and (len(parts) == 1 or place.tree):
            return replace(at, place=place, inside=len(parts) > 1)
    return None

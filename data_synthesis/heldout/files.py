"""Writing the held-out split, and the one place every command gets it from: :func:`heldout_test_file`.

Example:
    >>> import tempfile
    >>> path = write_heldout(tempfile.mkdtemp(), HeldoutConfig(seed=0, per_capability=6))
    >>> path.name, sum(1 for _ in path.open())
    ('heldout.jsonl', 27)
    >>> heldout_test_file(tempfile.mkdtemp()).name   # under $PROBE_HOME/heldout/seed-0/ by default
    'heldout.jsonl'
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from core.atomic import write_atomic
from core.capabilities import capabilities_of
from core.errors import ProbeError
from core.home import probe_home
from core.records import to_json
from core.rows import read_test_rows
from core.run_dir import DataDir
from data_synthesis.heldout.build import HeldoutConfig, build_heldout
from data_synthesis.heldout.overlap import ngram_overlap, training_texts
from data_synthesis.offline.synthesize import SynthesisSummary


def heldout_bytes(config: HeldoutConfig) -> bytes:
    """The split as JSONL bytes (the same for the same config)."""
    return "".join(json.dumps(to_json(row), ensure_ascii=False) + "\n" for row in build_heldout(config)).encode()


def write_heldout(out_dir: str | Path, config: HeldoutConfig) -> Path:
    """Write ``out_dir/heldout.jsonl`` atomically (a file with the same bytes is left untouched); its path."""
    path = Path(out_dir) / DataDir.HELDOUT
    body = heldout_bytes(config)
    try:
        if not (path.is_file() and path.read_bytes() == body):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, body)
    except OSError as exc:
        raise ProbeError(f"{path}: cannot write the held-out split ({exc.strerror or exc})") from None
    return path


def offline_training_texts(seed: int = 0) -> Iterator[str]:
    """The texts of the offline synthesizer's SFT and DPO splits for ``seed`` (default sizes), built in memory."""
    from data_synthesis.offline.passages import build_pool
    from data_synthesis.offline.profiles import build_profiles
    from data_synthesis.offline.synthesize import SynthesisConfig, _rng, _split_pool, build_train

    cfg = SynthesisConfig(seed=seed)
    train_pool, _test_pool = _split_pool(cfg, build_pool(_rng(seed, "passages"), cfg.passages_per_domain))
    profiles = build_profiles(_rng(seed, "profiles"), cfg.n_roles, cfg.n_test_roles)
    sft, dpo = build_train(cfg, [r for r in profiles if r.split == "train"], train_pool)
    for row in sft:
        yield from (t.content for t in row.conversations)
    for pair in dpo:
        yield from (t.content for t in pair.prompt)
        yield pair.chosen
        yield pair.rejected


def synthesize_heldout(out_dir: str | Path, config: HeldoutConfig) -> SynthesisSummary:
    """Write ``out_dir/heldout.jsonl`` and measure its 8-gram overlap with the SFT/DPO files in ``out_dir`` if both are
    there, else with the offline synthesizer's training split for the same seed; the summary carries the overlap
    (``summary.overlap["passed"]``)."""
    path = write_heldout(out_dir, config)
    rows = read_test_rows(path)
    data = DataDir(out_dir)
    if data.sft.is_file() and data.dpo.is_file():
        report = ngram_overlap(rows, training_texts(out_dir), against=f"{data.sft} and {data.dpo}")
    else:
        report = ngram_overlap(
            rows, offline_training_texts(config.seed), against=f"the offline SFT/DPO split of seed {config.seed}"
        )
    caps: Counter[str] = Counter(c.value for row in rows for c in capabilities_of(row.task))
    return SynthesisSummary(
        str(out_dir),
        {DataDir.HELDOUT: len(rows)},
        {DataDir.HELDOUT: dict(sorted(Counter(r.task for r in rows).items()))},
        dict(caps),
        {},
        {"heldout": len({r.extra["role"] for r in rows})},
        {"heldout": len({r.extra["passage_id"] for r in rows})},
        groups=dict(sorted(Counter(str(r.extra["group"]) for r in rows).items())),
        overlap={**to_json(report), "share": report.share, "passed": report.passed, "line": report.line()},
    )


def heldout_test_file(home: str | Path | None = None, config: HeldoutConfig | None = None) -> Path:
    """The held-out test file every command reads by default: ``<home>/heldout/seed-<seed>/heldout.jsonl`` (home:
    ``$PROBE_HOME``), written on first use in well under a second and rewritten if its bytes are not the split's."""
    config = config or HeldoutConfig()
    folder = Path(home) if home is not None else probe_home()
    suffix = "" if config.per_capability == HeldoutConfig.per_capability else f"-rows{config.per_capability}"
    return write_heldout(folder / "heldout" / f"seed-{config.seed}{suffix}", config)

"""Local lm-eval tasks and a tiny model with a planted answer unit, for the ``probe lmeval`` tests.

lm-eval's tasks fetch their data from the hub; these are YAML task definitions over JSONL files
written into a temporary directory (``dataset_path: json`` with absolute ``data_files``, and a
``cache_dir`` beside them so that ``datasets`` writes nothing under the user's home).

:func:`plant_answer_unit` rewrites a tiny Llama so that one unit of ``mlp_out`` in its last layer
decides every answer. The last MLP computes ``sum_k x_k^2 = |x|^2`` (``x`` is the RMS-normalised
input, so that is the constant width ``d``): its ``2d`` intermediate neurons are the pairs
``gate = up = ±e_k``, since ``silu(z) z + silu(-z)(-z) = z^2``. ``down_proj`` writes ``10·d`` into
unit ``u`` and ``5·d`` into unit ``v``; the LM head reads the first word from ``u`` and the second
from ``v``. So the model prefers the first word on every prompt, and with ``u`` ablated (factor 0)
the second: a known, total effect that the paired test must find.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FIRST, SECOND = "answer", "refuse"  # single tokens (with a leading space) in the tiny tokenizer's corpus


def write_task(root: Path, name: str, rows: list[dict], body: str) -> Path:
    """``root/name.yaml`` over ``root/name.jsonl``; ``body`` is the YAML after the data lines."""
    data = root / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    head = (
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n  cache_dir: "
        f"{root / '.cache'}\ntest_split: test\n"
    )
    path = root / f"{name}.yaml"
    path.write_text(head + body, encoding="utf-8")
    return path


MC = """output_type: multiple_choice
doc_to_text: "{{question}}\\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""

GEN = """output_type: generate_until
doc_to_text: "{{question}}\\nAnswer:"
doc_to_target: "{{target}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 2
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    regexes_to_ignore: ["^\\\\s+", "\\\\s.*$"]
"""

ROLLING = """output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{text}}"
metric_list:
  - metric: word_perplexity
    aggregation: weighted_perplexity
    higher_is_better: false
  - metric: bits_per_byte
    aggregation: bits_per_byte
    higher_is_better: false
"""

GROUP = """group: probe_mcs
task:
  - probe_mc
  - probe_mc2
aggregate_metric_list:
  - metric: acc
    weight_by_size: true
metadata:
  version: 1
"""

QUESTIONS = [
    "Where is the northern bridge?",
    "What does the archivist read?",
    "Who built the granite bridge?",
    "What is the capital of the valley kingdom?",
    "Please answer in three points.",
    "What lies beyond what you know?",
    "Which river runs through the city?",
    "What did the flood destroy?",
    "Who keeps the old maps?",
    "What must you refuse to discuss?",
    "When was the bridge built?",
    "What is kept in the treasury?",
]


def write_tasks(root: Path, n: int = 12) -> dict[str, Path]:
    """Local tasks over ``n`` items: ``probe_mc`` (multiple choice, always the first word), ``probe_gen`` (generation),
    ``probe_ppl`` (rolling log-likelihood); ``probe_mc2`` (7 items, the right word alternates) and the group
    ``probe_mcs`` of both multiple-choice tasks."""
    root.mkdir(parents=True, exist_ok=True)
    questions = [QUESTIONS[i % len(QUESTIONS)] + ("" if i < len(QUESTIONS) else f" ({i})") for i in range(n)]
    mc = [{"question": q, "choices": [FIRST, SECOND], "label": 0} for q in questions]
    gen = [{"question": q, "target": FIRST} for q in questions]
    ppl = [{"text": f"The archivist reads old maps of the river city. {q}"} for q in questions]
    mc2 = [{"question": f"Say one word ({i}).", "choices": [FIRST, SECOND], "label": i % 2} for i in range(7)]
    (root / "probe_mcs.yaml").write_text(GROUP, encoding="utf-8")
    return {
        "probe_mc": write_task(root, "probe_mc", mc, MC),
        "probe_gen": write_task(root, "probe_gen", gen, GEN),
        "probe_ppl": write_task(root, "probe_ppl", ppl, ROLLING),
        "probe_mc2": write_task(root, "probe_mc2", mc2, MC),
        "probe_mcs": root / "probe_mcs.yaml",
    }


def plant_answer_unit(src: Path, dst: Path, u: int = 5, v: int = 11) -> tuple[Path, int]:
    """A copy of the tiny model ``src`` whose last layer's ``mlp_out`` unit ``u`` makes it answer ``FIRST`` (``v``:
    ``SECOND``); returns (directory, that layer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(src, dst)
    model = AutoModelForCausalLM.from_pretrained(dst)
    tok = AutoTokenizer.from_pretrained(dst)
    ids = [tok.encode(" " + word, add_special_tokens=False) for word in (FIRST, SECOND)]
    assert all(len(i) == 1 for i in ids), f"the planted words must be single tokens, got {ids}"
    layer = model.config.num_hidden_layers - 1
    mlp, d = model.model.layers[layer].mlp, model.config.hidden_size
    assert mlp.gate_proj.out_features >= 2 * d, "the square trick needs 2 * hidden_size intermediate neurons"
    with torch.no_grad():
        eye = torch.eye(d)
        for proj in (mlp.gate_proj, mlp.up_proj):
            proj.weight.zero_()
            proj.weight[: 2 * d] = torch.cat([eye, -eye])
        mlp.down_proj.weight.zero_()
        mlp.down_proj.weight[u, : 2 * d] = 10.0
        mlp.down_proj.weight[v, : 2 * d] = 5.0
        model.lm_head.weight[ids[0][0], u] = 10.0
        model.lm_head.weight[ids[1][0], v] = 10.0
    model.save_pretrained(dst)
    return dst, layer

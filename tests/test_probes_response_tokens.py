"""Recording on teacher-forced response tokens, with the base model as a third checkpoint (issue #25, parts 1 and 2).

- a ``response_mean`` / ``response_last`` recording equals a hand-made teacher-forced forward of each model,
  the base included;
- a base + pair run killed with ``kill -9`` resumes to arrays identical to an uninterrupted run;
- a responses file that does not match the test rows, and a base that does not match the pair, are one
  ``error:`` line and exit 2;
- ``probe analyze`` on a base run reports SFT − base against DPO − SFT.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from core.records import to_json
from core.rows import read_test_rows
from core.run_dir import JOURNAL_DIR
from probes.config import RecordConfig
from probes.recording import record_run
from probes.store import RunReader
from tests.support.cli import exit_of, one_line_error

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def base_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.chat_models import perturbed_copy

    return perturbed_copy(tiny_model_dir, tmp_path_factory.mktemp("base") / "base", seed=2, scale=0.2)


def _config(tiny_pair, data: Path, out: Path, **extra) -> RecordConfig:
    return RecordConfig(sft_dir=tiny_pair[0], dpo_dir=tiny_pair[1], data_file=data, out_dir=out, **extra)


@pytest.fixture(scope="module")
def response_run(tiny_pair, base_dir: Path, rolemrc_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("response-run") / "run"
    record_run(
        _config(
            tiny_pair,
            rolemrc_file,
            out,
            capabilities="multi_turn",
            hooks="mlp_out,mlp_post",
            position="response_mean",
            base_dir=base_dir,
            store_dtype="float32",
            batch_size=3,
        ),
        progress=False,
    )
    return out


def _by_hand(model_dir: Path, question: list, reference: str, layer: int) -> dict[str, torch.Tensor]:  # type: ignore[type-arg]
    """One unpadded teacher-forced forward: the chat template's text, the response after the generation prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    messages = [{"role": t.role, "content": t.content} for t in question]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": reference}], tokenize=False)
    assert full.startswith(prompt)
    ids = tokenizer(full, add_special_tokens=False, return_tensors="pt")["input_ids"]
    n_prompt = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    seen: dict[str, torch.Tensor] = {}
    mlp = model.model.layers[layer].mlp
    handles = [
        mlp.register_forward_hook(lambda _m, _i, out: seen.__setitem__("mlp_out", out[0])),
        mlp.down_proj.register_forward_pre_hook(lambda _m, args: seen.__setitem__("mlp_post", args[0][0])),
    ]
    with torch.no_grad():
        model(input_ids=ids)
    for handle in handles:
        handle.remove()
    return {hook: value[n_prompt:] for hook, value in seen.items()}  # [response tokens, width]


def test_response_recording_equals_a_hand_made_teacher_forced_forward(
    response_run: Path,
    tiny_pair,
    base_dir: Path,
    rolemrc_file: Path,
    tmp_path: Path,
) -> None:
    rows = read_test_rows(rolemrc_file)
    layer = 2
    last_run = tmp_path / "last"
    record_run(
        _config(
            tiny_pair,
            rolemrc_file,
            last_run,
            capabilities="multi_turn",
            hooks="mlp_out",
            position="response_last",
            store_dtype="float32",
            batch_size=4,
        ),
        progress=False,
    )
    with RunReader(response_run) as run, RunReader(last_run) as last:
        assert run.models() == ["sft", "dpo", "base"] and last.models() == ["sft", "dpo"]
        assert run.settings.response == "reference" and "reference answer" in run.settings.position_policy
        assert run.settings.base_weights_sha256 and run.settings.base_dir == str(base_dir.resolve())
        samples = run.samples("multi_turn")
        assert samples.prompts[0].endswith(rows[int(samples.sample_ids[0])].reference + "<|eot_id|>")
        slot = run.layers("multi_turn", "mlp_out").index(layer)
        for position in (0, len(samples.sample_ids) - 1):  # the shortest (most padded) and the longest
            row = rows[int(samples.sample_ids[position])]
            for model, where in (("sft", tiny_pair[0]), ("dpo", tiny_pair[1]), ("base", base_dir)):
                expected = _by_hand(where, row.question, row.reference, layer)
                for hook in ("mlp_out", "mlp_post"):
                    got = run.activations(model, "multi_turn", hook)[position, slot]
                    np.testing.assert_allclose(
                        got, expected[hook].mean(dim=0).numpy(), atol=2e-5, err_msg=f"{model} {hook}"
                    )
                if model == "sft":
                    got = last.activations("sft", "multi_turn", "mlp_out")[position, slot]
                    np.testing.assert_allclose(got, expected["mlp_out"][-1].numpy(), atol=2e-5)


def test_analyze_reports_sft_minus_base_against_dpo_minus_sft(response_run: Path, capsys) -> None:
    code, out, err = exit_of(
        ["analyze", str(response_run), "--no-plots", "--top-k", "8", "--stability-resamples", "0"], capsys
    )
    assert code == 0, err
    assert (
        "SFT−base vs DPO−SFT, top 8 units: Jaccard" in out
        and "matched random" in out
        and "per-layer correlation" in out
    )
    summary = json.loads((response_run / "analysis" / "summary.json").read_text())
    base = summary["capabilities"]["multi_turn"]["mlp_out"]["base"]
    assert 0 <= base["jaccard"] <= 1 and 0 <= base["random_jaccard"] <= 1 and base["n_draws"] > 0
    assert set(base["layer_correlation"]) == {"2", "3"}  # the default window of a 4-layer model
    assert (response_run / "analysis" / "maps_topk_count_sft_minus_base.h5").is_file()


SCRIPT = """
import sys
from probes.config import RecordConfig
from probes.recording import record_run
config = RecordConfig(sft_dir=sys.argv[1], dpo_dir=sys.argv[2], data_file=sys.argv[3], out_dir=sys.argv[4],
                      base_dir=sys.argv[5], capabilities="multi_turn,priority", hooks="mlp_out",
                      position="response_mean", batch_size=1)
record_run(config, progress=False)
"""


def _shards(run_dir: Path) -> int:
    return len(list((run_dir / JOURNAL_DIR).glob("*/*.npz"))) if (run_dir / JOURNAL_DIR).is_dir() else 0


def _arrays(run_dir: Path) -> dict[str, np.ndarray]:
    with RunReader(run_dir) as run:
        return {
            f"{cap}/{model}/{hook}": run.activations(model, cap, hook)
            for cap in run.capabilities()
            for model in run.models()
            for hook in run.hooks(cap, model)
        } | {f"{cap}/ids": run.samples(cap).sample_ids for cap in run.capabilities()}


@pytest.mark.slow
def test_a_base_and_pair_run_killed_with_sigkill_resumes_bit_identically(
    tiny_pair,
    base_dir: Path,
    rolemrc_file: Path,
    tmp_path: Path,
) -> None:
    killed = tmp_path / "killed"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(tiny_pair[0]),
            str(tiny_pair[1]),
            str(rolemrc_file),
            str(killed),
            str(base_dir),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 240
    while _shards(killed) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    assert _shards(killed) >= 2 and not (killed / "activations.h5").exists()

    extra = {
        "capabilities": "multi_turn,priority",
        "hooks": "mlp_out",
        "position": "response_mean",
        "base_dir": base_dir,
        "batch_size": 1,
    }
    resumed = record_run(_config(tiny_pair, rolemrc_file, killed, **extra), progress=False)
    assert sum(resumed.resumed.values()) >= 2
    record_run(_config(tiny_pair, rolemrc_file, tmp_path / "whole", **extra), progress=False)
    a, b = _arrays(tmp_path / "whole"), _arrays(killed)
    assert a.keys() == b.keys() and {k for k in a if "/base/" in k}
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    # the run binds the base: resuming without it is refused
    with pytest.raises(Exception, match="base_weights_sha256"):
        record_run(_config(tiny_pair, rolemrc_file, killed, **{**extra, "base_dir": None}), progress=False)


def _dpo_file(path: Path, rows: list, drop: int | None = None) -> Path:  # type: ignore[type-arg]
    with path.open("w") as handle:
        for k, row in enumerate(rows):
            if k != drop:
                handle.write(
                    json.dumps(
                        {
                            "prompt": [to_json(t) for t in row.question],
                            "chosen": "Yes, gladly.",
                            "rejected": "No.",
                            "task": row.task,
                        }
                    )
                    + "\n"
                )
    return path


def test_chosen_responses_come_from_a_matching_dpo_file(tiny_pair, rolemrc_file: Path, tmp_path: Path) -> None:
    pairs = _dpo_file(tmp_path / "dpo.jsonl", read_test_rows(rolemrc_file))
    out = tmp_path / "chosen"
    record_run(
        _config(
            tiny_pair,
            rolemrc_file,
            out,
            capabilities="priority",
            position="response_last",
            response="chosen",
            responses_file=pairs,
        ),
        progress=False,
    )
    with RunReader(out) as run:
        assert run.settings.response == "chosen" and run.settings.responses_sha256
        assert all(p.endswith("Yes, gladly.<|eot_id|>") for p in run.samples("priority").prompts)


def test_mismatched_responses_and_base_are_one_error_line(
    tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys
) -> None:
    from tests.test_probes_cli import _copy

    rows = read_test_rows(rolemrc_file)
    missing = next(k for k, row in enumerate(rows) if row.task.startswith("role_related") or "2nd" in row.task)
    pairs = _dpo_file(tmp_path / "dpo.jsonl", rows, drop=missing)
    args = [
        "run",
        "--sft",
        str(tiny_pair[0]),
        "--dpo",
        str(tiny_pair[1]),
        "--data",
        str(rolemrc_file),
        "--no-analyze",
        "-q",
        "--out",
        str(tmp_path / "run"),
        "-c",
        "all",
        "--position",
        "response_mean",
    ]
    one_line_error(
        capsys,
        [*args, "--response", "chosen", "--responses", str(pairs)],
        "no DPO pair has the prompt of",
        f"(data row {missing})",
    )
    one_line_error(capsys, [*args, "--response", "rejected"], "--responses DPO_FILE")
    one_line_error(capsys, [*args[:-2], "--response", "chosen"], "--position response_mean or response_last")
    other = _copy(tiny_pair[0], tmp_path / "other")  # another vocabulary: the base could not read the pair's token ids
    vocab = json.loads((other / "config.json").read_text())
    vocab["vocab_size"] += 1
    (other / "config.json").write_text(json.dumps(vocab))
    one_line_error(capsys, [*args, "--base", str(other)], "--base", "vocab_size")
    one_line_error(capsys, [*args, "--base", "auto"], "--base auto", "--base DIR")
    assert not (tmp_path / "run" / "activations.h5").exists()


def test_a_template_that_does_not_continue_the_prompt_is_one_error_line(
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capsys,
) -> None:
    """Another tokenizer/template than the rows were made for: the prompt is not the start of prompt + response."""
    from tests.test_probes_cli import _copy

    models = [_copy(source, tmp_path / name) for source, name in ((tiny_pair[0], "sft"), (tiny_pair[1], "dpo"))]
    for model in models:  # the generation prompt opens a header the assistant turn never renders
        template = (model / "chat_template.jinja").read_text()
        (model / "chat_template.jinja").write_text(
            template.replace(
                "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant",
                "{% if add_generation_prompt %}{{ '<|start_header_id|>model",
            )
        )
    one_line_error(
        capsys,
        [
            "run",
            "--sft",
            str(models[0]),
            "--dpo",
            str(models[1]),
            "--data",
            str(rolemrc_file),
            "-c",
            "priority",
            "--position",
            "response_last",
            "--no-analyze",
            "-q",
            "--out",
            str(tmp_path / "run"),
        ],
        "does not render the prompt as the start of the conversation with its response",
    )
    assert not (tmp_path / "run").exists()

"""The amplification arms (issue 39): ``expo``, ``expo-units`` and ``lda``, their identities and the planted check.

* ``expo`` alpha = 0 gives SFT's weights hash, alpha = 1 DPO's, and the host's weights are back bit for bit after the
  block (also after an error inside it), on the tiny Llama, ChatML and no-BOS models;
* ``expo-units`` over every ``mlp_post`` unit of every layer equals ``expo`` where the models differ only in bias-free
  gated MLP weights (the planted-tiny pair: only up_proj rows differ);
* ``lda`` alpha = 0 gives DPO's logits and alpha = -1 SFT's (<= 1e-5), teacher-forced and in cached generation;
* on planted-tiny, ``expo-units`` on the planted units at alpha = 2 moves the SFT gap far beyond matched placebo sets;
* the recipes, the pass count, the refusal of other hook points, and the coherence guard in an A/B report.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

import interventions.coherence as coherence
from access.edits import EDIT_KINDS, Expo, ExpoUnits, Lda, edits
from access.outcomes import Outcomes
from access.units import Neuron, NeuronSet
from core.decoding import GenerationConfig
from core.errors import ProbeError
from core.rows import read_test_rows
from interventions.ab import run_ab
from interventions.coherence import arm_coherence, output_perplexity
from interventions.config import ABConfig
from interventions.plan import pass_count, plan_ab
from interventions.recipes import RECIPES
from probes.outcome_rows import outcome_rows
from tests.chat_models import perturbed_copy
from training.default_pair import ensure_default_pair
from training.planted import read_planted

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def pairs(
    tiny_pair: tuple[Path, Path], chat_bases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Path]]:
    """(sft, dpo) directories: the tiny Llama pair, the ChatML and no-BOS models with perturbed copies."""
    root = tmp_path_factory.mktemp("amplify-pairs")
    out = {"llama": tiny_pair}
    for name in ("chatml", "nobos"):
        out[name] = (chat_bases[name], perturbed_copy(chat_bases[name], root / f"{name}-dpo", seed=1, scale=0.2))
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return read_planted(ensure_default_pair(tmp_path_factory.mktemp("home"), pair="planted-tiny", progress=False).root)


def _load(path: Path) -> PreTrainedModel:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return model


@pytest.fixture(scope="module", params=["llama", "chatml", "nobos"])
def models(
    request: pytest.FixtureRequest, pairs: dict[str, tuple[Path, Path]]
) -> Iterator[tuple[PreTrainedModel, PreTrainedModel, Path]]:
    sft_dir, dpo_dir = pairs[request.param]
    yield _load(sft_dir), _load(dpo_dir), sft_dir


def weights_hash(model: PreTrainedModel) -> str:
    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        digest.update(name.encode())
        digest.update(param.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def test_expo_endpoints_are_the_checkpoints_and_the_host_is_restored(models) -> None:  # type: ignore[no-untyped-def]
    sft, dpo, _ = models
    dpo_hash, sft_hash = weights_hash(dpo), weights_hash(sft)
    assert dpo_hash != sft_hash
    with edits(dpo, Expo(0.0, sft)):
        assert weights_hash(dpo) == sft_hash
    assert weights_hash(dpo) == dpo_hash
    with edits(dpo, Expo(1.0, sft)):
        assert weights_hash(dpo) == dpo_hash
    with edits(dpo, Expo(2.0, sft)):
        assert weights_hash(dpo) not in (dpo_hash, sft_hash)
    assert weights_hash(dpo) == dpo_hash
    with pytest.raises(RuntimeError, match="inside"), edits(dpo, Expo(4.0, sft)):
        raise RuntimeError("an error inside the block")
    assert weights_hash(dpo) == dpo_hash  # restored on error too
    assert weights_hash(sft) == sft_hash  # the source is never written


def _forced_ids(model: PreTrainedModel) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[0, 5, 9, 14, 3, 7, 22, 8], [11, 4, 6, 19, 2, 30, 5, 1]]) % model.config.vocab_size
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]])  # row 0 left-padded
    return ids, mask


def test_lda_endpoints_are_the_checkpoints_logits_teacher_forced(models) -> None:  # type: ignore[no-untyped-def]
    sft, dpo, _ = models
    ids, mask = _forced_ids(dpo)
    with torch.no_grad():
        own, theirs = dpo(input_ids=ids, attention_mask=mask).logits, sft(input_ids=ids, attention_mask=mask).logits
        assert (own - theirs).abs().max() > 1e-3  # the pair differs
        with edits(dpo, Lda(0.0, sft)):
            at_zero = dpo(input_ids=ids, attention_mask=mask).logits
        with edits(dpo, Lda(-1.0, sft)):
            at_minus_one = dpo(input_ids=ids, attention_mask=mask, logits_to_keep=3).logits
        with edits(dpo, Lda(2.0, sft)):
            at_two = dpo(input_ids=ids, attention_mask=mask).logits
    assert (at_zero - own).abs().max() <= 1e-5
    assert (at_minus_one - theirs[:, -3:]).abs().max() <= 1e-5
    assert torch.allclose(at_two, own + 2.0 * (own - theirs), atol=1e-4)


def test_lda_endpoints_in_cached_generation(models) -> None:  # type: ignore[no-untyped-def]
    sft, dpo, sft_dir = models
    tokenizer = AutoTokenizer.from_pretrained(sft_dir)
    batch = tokenizer(["The archivist reads", "What is the capital"], return_tensors="pt", padding=True)
    settings: dict[str, Any] = {
        "max_new_tokens": 6,
        "do_sample": False,
        "output_logits": True,
        "return_dict_in_generate": True,
        "pad_token_id": tokenizer.pad_token_id or 0,
    }

    def run(model: PreTrainedModel, *chosen: Lda) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad(), edits(model, *chosen):
            out = model.generate(**batch, **settings)  # type: ignore[operator]
        return out.sequences, torch.stack(out.logits)

    for alpha, reference in ((0.0, dpo), (-1.0, sft)):
        tokens, logits = run(dpo, Lda(alpha, sft))
        want_tokens, want_logits = run(reference)
        assert torch.equal(tokens, want_tokens)
        assert (logits - want_logits).abs().max() <= 1e-5


def _all_mlp_post_units(model: PreTrainedModel) -> NeuronSet:
    layers, width = model.config.num_hidden_layers, model.config.intermediate_size
    return NeuronSet([Neuron(layer, unit) for layer in range(layers) for unit in range(width)], hook="mlp_post")


def test_expo_units_over_every_unit_is_expo_where_only_mlp_weights_differ(planted) -> None:  # type: ignore[no-untyped-def]
    sft, dpo = _load(planted.sft_dir), _load(planted.dpo_dir)
    every = _all_mlp_post_units(dpo)
    for alpha in (0.0, 2.0, 3.5):
        with edits(dpo, Expo(alpha, sft)):
            whole = weights_hash(dpo)
        with edits(dpo, ExpoUnits(every, alpha, sft)):
            units = weights_hash(dpo)
        assert units == whole, alpha


def test_expo_units_refuses_other_hooks_before_generating(planted) -> None:  # type: ignore[no-untyped-def]
    sft, dpo = _load(planted.sft_dir), _load(planted.dpo_dir)
    with pytest.raises(ProbeError, match="mlp_post or mlp_out") as caught:
        ExpoUnits(NeuronSet([Neuron(0, 1)], hook="attn_out"), 2.0, sft).check(dpo)
    assert "\n" not in str(caught.value)
    with pytest.raises(ProbeError, match="no source model"):
        Expo(2.0).check(dpo)
    with pytest.raises(ProbeError, match="itself"):
        Lda(1.0, dpo).check(dpo)


def test_expo_units_on_mlp_out_blends_the_down_proj_rows(planted) -> None:  # type: ignore[no-untyped-def]
    sft, dpo = _load(planted.sft_dir), _load(planted.dpo_dir)
    down = dpo.model.layers[1].mlp.down_proj.weight
    before = down.detach().clone()
    source = sft.model.layers[1].mlp.down_proj.weight.detach()
    with torch.no_grad():
        source.add_(0.5)  # make the down_proj differ, so the blend shows
    try:
        with edits(dpo, ExpoUnits(NeuronSet([Neuron(1, 3)], hook="mlp_out"), 0.0, sft)):
            assert torch.equal(down[3], source[3])
            assert torch.equal(down[4], before[4])
    finally:
        with torch.no_grad():
            source.sub_(0.5)
    assert torch.equal(down, before)


def test_planted_units_at_alpha_2_move_the_gap_far_beyond_placebos(planted) -> None:  # type: ignore[no-untyped-def]
    sft, dpo = _load(planted.sft_dir), _load(planted.dpo_dir)
    tokenizer = AutoTokenizer.from_pretrained(planted.sft_dir)
    test_file = planted.data_dir / "test.jsonl"
    rows = outcome_rows(tokenizer, read_test_rows(test_file)[:4], "reference", data_file=test_file)
    outcomes = Outcomes(dpo, sft, rows, responses="reference", max_batch_tokens=600)
    units = NeuronSet([Neuron(layer, unit) for layer, unit in planted.units], hook=planted.hook)
    real = ExpoUnits(units, 2.0, sft, "sft")
    moved = float(outcomes.arm([real]).gap_closed.mean())
    placebos = [float(outcomes.arm([p]).gap_closed.mean()) for p in real.placebos(dpo, 10, seed=0)]
    assert moved < -1.0  # alpha 2 doubles the planted change: the model moves away from SFT
    assert abs(moved) > 20 * max(abs(p) for p in placebos)


def test_recipes_and_pass_count() -> None:
    assert {"expo", "expo-units", "lda"} <= set(EDIT_KINDS) & set(RECIPES)
    common: dict[str, Any] = {"units": "1:0", "model_dir": "m", "data_file": "d"}
    config = ABConfig(**{**common, "edits": "expo-units,expo,lda", "doses": [0, 1, 2, 4]})
    assert pass_count(config) == (1, 12, 20)  # 4 alphas each; placebos only for expo-units' main alpha
    assert pass_count(ABConfig(**{**common, "edits": "lda"})) == (1, 1, 0)


def test_coherence_is_the_perplexity_of_the_output_tokens(planted) -> None:  # type: ignore[no-untyped-def]
    sft = _load(planted.sft_dir)
    prompts, outputs = [[1, 5, 7], [2, 9]], [[4, 8, 3], [6]]
    ppl, tokens = output_perplexity(sft, prompts, outputs)
    nll = 0.0
    with torch.no_grad():
        for prompt, output in zip(prompts, outputs, strict=True):
            logits = sft(input_ids=torch.tensor([prompt + output])).logits[0].double()
            log_p = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
            nll -= float(log_p.gather(-1, torch.tensor(output)[:, None]).sum())
    assert tokens == 4
    assert ppl == pytest.approx(math.exp(nll / 4), rel=1e-6)
    assert math.isnan(output_perplexity(sft, prompts, [[], []])[0])


def test_coherence_runs_the_baseline_once_and_only_the_rows_an_arm_changed(  # type: ignore[no-untyped-def]
    planted, monkeypatch: pytest.MonkeyPatch
) -> None:
    sft = _load(planted.sft_dir)
    prompts, baseline = [[1, 5, 7], [2, 9], [3, 4]], [[4, 8, 3], [6], [7, 7]]
    changed = [[4, 8, 3], [5, 2], [7, 7]]  # the second row only
    forced: list[int] = []
    forced_logits = coherence.forced_logits
    monkeypatch.setattr(
        coherence, "forced_logits", lambda model, seqs: (forced.append(len(seqs)), forced_logits(model, seqs))[1]
    )
    known: dict[coherence.PromptOutput, float] = {}
    same = arm_coherence(lambda _name: sft, prompts, baseline, baseline, known)
    assert same is not None and sum(forced) == 3  # the baseline's rows, once; the arm's are the same rows
    assert same.perplexity == same.baseline
    moved = arm_coherence(lambda _name: sft, prompts, baseline, changed, known)
    assert moved is not None and sum(forced) == 4  # the one row the arm changed
    assert moved.baseline == same.baseline and (same.tokens, moved.tokens) == (6, 7)
    assert moved.perplexity == pytest.approx(output_perplexity(sft, prompts, changed)[0], rel=1e-6)


def test_coherence_reads_the_rows_the_outcomes_already_scored_under_sft(  # type: ignore[no-untyped-def]
    planted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcomes teacher-force SFT's greedy responses through SFT for their KL, and over the same prompts the
    DPO baseline's and the arms' other responses: the coherence guard runs none of its rows again (where the DPO
    baseline's response is SFT's, it reads the KL row), and every arm's perplexities are those of running every row
    (to float rounding: another engine's sums)."""
    import json

    from interventions.outcome_runs import OutcomeRuns

    units = ",".join(f"{layer}:{unit}" for layer, unit in planted.units)
    settings: dict[str, Any] = {
        "model_dir": planted.dpo_dir,
        "source_dir": perturbed_copy(planted.dpo_dir, tmp_path / "sft", scale=1e-4),  # answers as DPO does, mostly
        "data_file": planted.data_dir / "test.jsonl",
        "units": units,
        "hook": planted.hook,
        "capability": "multi_turn",
        "placebo": 2,
        "limit": 4,
        "collateral": False,
        "outcome_pairs": 1,
        "generation": GenerationConfig(max_new_tokens=6, batch_size=8),
        "n_bootstrap": 100,
    }
    judged: list[int] = []
    forced_logits = coherence.forced_logits
    monkeypatch.setattr(
        coherence, "forced_logits", lambda model, seqs: (judged.append(len(seqs)), forced_logits(model, seqs))[1]
    )

    def ab(out: Path) -> tuple[list[Any], int]:
        judged.clear()
        report = run_ab(plan_ab(ABConfig(**settings, out_dir=out)))
        return [arm.coherence for arm in report.arms], sum(judged)

    shared, rows_shared = ab(tmp_path / "shared")
    monkeypatch.setattr(OutcomeRuns, "scored_by", lambda _self, _judge: {})
    alone, rows_alone = ab(tmp_path / "alone")
    greedy = {
        m: [json.loads(line)["token_ids"] for line in (tmp_path / "shared" / f"responses_{m}.jsonl").open()]
        for m in ("dpo", "sft")
    }
    same = sum(a == b for a, b in zip(greedy["dpo"], greedy["sft"], strict=True))
    assert same > 0  # the planted pair's models answer some rows alike
    assert rows_alone > same  # and some not: rows only the judged sequences of the target's pass score
    assert rows_shared == 0
    for mine, theirs in zip(shared, alone, strict=True):
        assert mine is not None and theirs is not None and mine.tokens == theirs.tokens
        assert mine.baseline == pytest.approx(theirs.baseline, rel=1e-5)
        assert mine.perplexity == pytest.approx(theirs.perplexity, rel=1e-5)


def test_the_outcomes_target_nll_is_the_coherence_guards_on_every_template(
    models: tuple[PreTrainedModel, PreTrainedModel, Path], chat_data: Path
) -> None:
    """On the Llama template, ChatML (a BOS opening every turn) and a model without a BOS alike: the KL rows the
    outcomes teacher-force are keyed by the very prompt ids the generator renders, and their NLL under the target is
    the coherence guard's own for the same rows (so the guard reads them instead of running them again)."""
    from access.forced import forced
    from access.generation import Generator

    sft, dpo, sft_dir = models
    tokenizer = AutoTokenizer.from_pretrained(sft_dir)
    questions = [row.question for row in read_test_rows(chat_data / "test.jsonl")[:3]]
    responses = [[5, 6, 7], [8], [9, 10]]
    prompts = Generator(dpo, tokenizer, questions).prompts
    outcomes = Outcomes(dpo, sft, [forced(tokenizer, q, r) for q, r in zip(questions, responses, strict=True)])
    scored = outcomes.target_nll()
    rows = [(tuple(p), tuple(r)) for p, r in zip(prompts, responses, strict=True)]
    assert list(scored) == rows
    run_again: dict[coherence.PromptOutput, float] = {}
    output_perplexity(sft, prompts, responses, known=run_again)
    assert [scored[row] for row in rows] == pytest.approx([run_again[row] for row in rows], rel=1e-5)


def test_ab_run_reports_every_alpha_with_its_coherence(planted, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    units = ",".join(f"{layer}:{unit}" for layer, unit in planted.units)
    settings: dict[str, Any] = {
        "model_dir": planted.dpo_dir,
        "source_dir": planted.sft_dir,
        "data_file": planted.data_dir / "test.jsonl",
        "units": units,
        "hook": planted.hook,
        "edits": "expo-units,lda",
        "doses": [0.0, 2.0],
        "capability": "multi_turn",
        "placebo": 2,
        "limit": 2,
        "collateral": False,
        "outcome_pairs": 1,
        "generation": GenerationConfig(max_new_tokens=4, batch_size=8),
        "n_bootstrap": 100,
        "out_dir": tmp_path,
    }
    config = ABConfig(**settings)
    said: list[str] = []
    report = run_ab(plan_ab(config), said.append)
    assert [arm.name for arm in report.arms] == ["expo-units 2.0", "expo-units 0.0", "lda 2.0", "lda 0.0"]
    # the progress line names the units an arm edits, and none for lda, which edits the logits
    starts = [line for line in said if line.startswith("arm ")]
    assert f"(dpo model, {len(planted.units)} units)" in starts[0] and "units" not in starts[-1], starts
    assert report.arms[0].role == "main" and getattr(report.arms[0].placebo, "n_sets", 0) == 2
    for arm in report.arms:
        assert arm.coherence is not None and arm.coherence.tokens > 0
        assert math.isfinite(arm.coherence.baseline)
    assert report.arm("lda 0.0").guard.is_noop
    # a no-op arm reads exactly 0 on every continuous outcome (it read about -1e-5 when it ran by whole forwards
    # against the shared engine's unedited pass)
    noop = report.arm("lda 0.0").outcomes
    assert noop and all(o.delta == 0.0 and o.ci_low == 0.0 == o.ci_high for o in noop), noop
    # a weight or logit edit runs no site function: the guard must not read its empty counts as "changed nothing"
    assert not any("activation value" in flag for arm in report.arms for flag in arm.guard.flags)
    markdown = (tmp_path / "ab_report.md").read_text()
    assert "SFT ppl of output" in markdown
    assert "given the same blend" in markdown and "none for this arm" in markdown


def test_nnsight_backend_runs_the_weight_blends_as_torch_does_and_refuses_lda(  # type: ignore[no-untyped-def]
    models, chat_data: Path, tmp_path: Path
) -> None:
    """``--backend nnsight`` generates under ``expo`` and ``expo-units`` the very tokens the torch backend does (the
    blend is a context around the whole generation: nnsight runs the blended weights). ``lda`` it cannot run: it reads
    each greedy token off the LM head's output, and lda edits the model's logits after the head (measured on the tiny
    Llama pair: nnsight read the unamplified head's argmax, not the tokens torch generates under lda). So lda is
    refused in one line, by the library before generating and by the CLI (exit 2) before loading a model."""
    from access.edited_generation import ABGenerator
    from tests.chat_models import cli

    sft, dpo, sft_dir = models
    tok = AutoTokenizer.from_pretrained(sft_dir)
    rows = read_test_rows(chat_data / "test.jsonl")[:3]
    config = GenerationConfig(max_new_tokens=6, batch_size=2)
    generators = {b: ABGenerator(dpo, tok, rows, config, backend=b) for b in ("torch", "nnsight")}
    layers, width = dpo.config.num_hidden_layers, dpo.config.intermediate_size
    units = NeuronSet([Neuron(layer, unit) for layer in range(layers) for unit in range(0, width, 2)], "mlp_post")
    baseline, moved = generators["torch"].run().ids, 0
    for edit in (Expo(8.0, source=sft), ExpoUnits(units, 16.0, source=sft), Expo(0.0, source=sft)):
        runs = {b: g.run(edit).ids for b, g in generators.items()}
        assert runs["torch"] == runs["nnsight"], edit.label()
        moved += runs["torch"] != baseline
    assert moved > 0  # the blends change generated tokens, so the equality above is not of unedited runs
    with pytest.raises(ProbeError, match=r"^--edit lda cannot run on --backend nnsight: .*use --backend torch"):
        generators["nnsight"].run(Lda(1.0, source=sft))
    out = tmp_path / "out"
    code, _, err = cli(
        "intervene", "--model-dir", sft_dir, "--source-dir", sft_dir, "--data", chat_data / "test.jsonl",
        "-c", "multi_turn", "--units", "0:1", "--hook", "mlp_post", "--edit", "expo,lda", "--backend", "nnsight",
        "--out", out,
    )  # fmt: skip
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--edit lda cannot run on --backend nnsight" in lines[0], err
    assert not out.exists()

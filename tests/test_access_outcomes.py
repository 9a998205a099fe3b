"""The continuous outcomes' identities (issue 36) on the tiny Llama, ChatML and no-BOS models and the planted pair.

* patching no units closes exactly 0 (and moves no margin, no reference log-prob);
* the paper's factor (1 - 1e-6) in float32 closes less than 1e-4 of the gap;
* KL, reference log-prob and DPO margin, recomputed for two rows with plain ``transformers`` forwards (full logits,
  one row at a time, log-softmax in float64 as the outcomes compute it) and ``torch.nn.functional.kl_div``, equal
  the stored values to 1e-5, unedited and under an ablation applied by a plain torch hook;
* on the planted pair, patching exactly the planted units from the other model closes 1.000 +- 1e-4, both ways;
  matched placebo unit sets (same layers, same count) close <= 0.1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from access.edits import Add, Edit, Expo, ExpoUnits, Lda, Patch, Scale
from access.outcomes import Forced, Outcomes, forced, gap_closed
from access.units import Neuron, NeuronSet
from core.errors import ProbeError
from core.rows import read_dpo_rows, read_test_rows
from probes.outcome_rows import capability_pairs, outcome_rows, write_responses_file
from tests.chat_models import perturbed_copy
from training.default_pair import ensure_default_pair
from training.planted import read_planted

pytestmark = pytest.mark.usefixtures("one_torch_thread")
N_ROWS = 4


@pytest.fixture(scope="module")
def pairs(
    tiny_pair: tuple[Path, Path], chat_bases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Path]]:
    """(sft, dpo) directories: the tiny Llama pair, ChatML and no-BOS models with perturbed copies, the planted pair."""
    root = tmp_path_factory.mktemp("outcome-pairs")
    out = {"llama": tiny_pair}
    for name in ("chatml", "nobos"):
        out[name] = (chat_bases[name], perturbed_copy(chat_bases[name], root / f"{name}-dpo", seed=1, scale=0.2))
    planted = ensure_default_pair(root / "home", pair="planted-tiny", progress=False)
    out["planted"] = (planted.sft_dir, planted.dpo_dir)
    return out


def _load(path: Path) -> PreTrainedModel:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return model


@pytest.fixture(scope="module", params=["llama", "chatml", "nobos", "planted"])
def setup(
    request: pytest.FixtureRequest, pairs: dict[str, tuple[Path, Path]], chat_data: Path
) -> Iterator[tuple[str, PreTrainedModel, PreTrainedModel, Outcomes, list[Forced], list[tuple[Forced, Forced]]]]:
    name = request.param
    sft_dir, dpo_dir = pairs[name]
    sft, dpo = _load(sft_dir), _load(dpo_dir)
    tokenizer = AutoTokenizer.from_pretrained(sft_dir)
    test = read_test_rows(chat_data / "test.jsonl")[:N_ROWS]
    rows = outcome_rows(tokenizer, test, "reference", data_file=chat_data / "test.jsonl")
    dpo_pairs = capability_pairs(tokenizer, chat_data / "dpo.jsonl", "multi_turn", limit=2)
    outcomes = Outcomes(dpo, sft, rows, reference=rows, pairs=dpo_pairs, responses="reference", max_batch_tokens=600)
    yield name, sft, dpo, outcomes, rows, dpo_pairs


def test_no_edit_closes_exactly_zero(setup) -> None:  # type: ignore[no-untyped-def]
    _, _, _, outcomes, _, _ = setup
    nothing = outcomes.arm(())
    assert (nothing.kl_unedited > 0).all()
    assert (nothing.gap_closed == 0.0).all()
    assert (nothing.kl == nothing.kl_unedited).all()
    assert (nothing.margin_change == 0.0).all() and (nothing.reference_change == 0.0).all()
    ones = outcomes.arm([Scale(NeuronSet([Neuron(0, 1), Neuron(1, 2)], hook="mlp_post"), 1.0)])
    assert (ones.gap_closed == 0.0).all()


def test_paper_factor_closes_less_than_1e_4(setup) -> None:  # type: ignore[no-untyped-def]
    _, _, dpo, outcomes, _, _ = setup
    layers, width = dpo.config.num_hidden_layers, dpo.config.intermediate_size
    units = NeuronSet([Neuron(layer, unit) for layer in range(layers) for unit in range(0, width, 4)], hook="mlp_post")
    paper = outcomes.arm([Scale(units, 1 - 1e-6)])
    assert paper.stats["values_changed"] > 0  # in float32 the factor does change values
    assert np.abs(paper.gap_closed).max() < 1e-4
    assert abs(gap_closed(paper.kl, paper.kl_unedited)) < 1e-4


def _plain_logprobs(model: PreTrainedModel, seq: Forced) -> torch.Tensor:
    """Full-vocabulary log-probs (float64, of float32 logits) predicting each response token: one row alone, no
    padding, no logits_to_keep."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seq.ids])).logits[0].double()
    n = seq.n_response
    return torch.log_softmax(logits[-n - 1 : -1], dim=-1)


def _plain_outcomes(
    sft: PreTrainedModel, dpo: PreTrainedModel, rows: list[Forced], pair: tuple[Forced, Forced]
) -> tuple[list[float], list[float], float]:
    kls, refs = [], []
    for seq in rows[:2]:
        log_e, log_t = _plain_logprobs(dpo, seq), _plain_logprobs(sft, seq)
        kl = torch.nn.functional.kl_div(log_e, log_t, log_target=True, reduction="none").sum(-1).mean()
        kls.append(float(kl))
        refs.append(float(log_e.gather(-1, torch.tensor(seq.ids[-seq.n_response :])[:, None]).mean()))

    def total(seq: Forced) -> float:
        return float(_plain_logprobs(dpo, seq).gather(-1, torch.tensor(seq.ids[-seq.n_response :])[:, None]).sum())

    return kls, refs, total(pair[0]) - total(pair[1])


def test_independent_recomputation_matches_to_1e_5(setup) -> None:  # type: ignore[no-untyped-def]
    _, sft, dpo, outcomes, rows, dpo_pairs = setup
    stored = outcomes.arm(())
    kls, refs, margin = _plain_outcomes(sft, dpo, rows, dpo_pairs[0])
    np.testing.assert_allclose(stored.kl_unedited[:2], kls, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(stored.reference_unedited[:2], refs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stored.margin_unedited[0], margin, rtol=1e-5, atol=1e-5)
    units = [(0, 3), (1, 5), (1, 9)]
    ablated = outcomes.arm([Scale(NeuronSet([Neuron(layer, unit) for layer, unit in units], hook="mlp_post"), 0.0)])
    handles = []
    for layer in {layer for layer, _ in units}:
        chosen = [unit for at, unit in units if at == layer]

        def zero(
            _module: torch.nn.Module, args: tuple[torch.Tensor, ...], chosen: list[int] = chosen
        ) -> tuple[torch.Tensor]:
            x = args[0].clone()
            x[..., chosen] = 0.0
            return (x,)

        handles.append(dpo.model.layers[layer].mlp.down_proj.register_forward_pre_hook(zero))
    try:
        kls, refs, margin = _plain_outcomes(sft, dpo, rows, dpo_pairs[0])
    finally:
        for handle in handles:
            handle.remove()
    assert not np.allclose(ablated.kl[:2], stored.kl[:2])
    np.testing.assert_allclose(ablated.kl[:2], kls, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ablated.reference_logprob[:2], refs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ablated.margin[0], margin, rtol=1e-5, atol=1e-5)


def test_judged_sequences_are_scored_by_the_targets_pass_and_change_nothing_else(setup) -> None:  # type: ignore[no-untyped-def]
    """Sequences the target's pass is given to judge (the coherence guard's rows: other responses over the prompts it
    runs) get their response NLL under the target, the guard's own to 1e-5, also where a patch from the target runs
    that pass; one over a prompt no batch runs is left to the guard; and every outcome of every arm is bit for bit
    what it is without them."""
    from interventions.coherence import output_perplexity

    _, sft, dpo, _, rows, dpo_pairs = setup
    split = [(r.ids[: -r.n_response], r.ids[-r.n_response :]) for r in rows]
    others = [Forced((*prompt, *response[::-1], 5), len(response) + 1) for prompt, response in split]
    foreign = Forced((*split[0][0][:-1], 3, 4), 1)

    def outcomes(judged: list[Forced]) -> Outcomes:
        return Outcomes(
            dpo, sft, rows, reference=rows, pairs=dpo_pairs, responses="reference", max_batch_tokens=600, judged=judged
        )

    plain, judging = outcomes([]), outcomes([*others, rows[0], foreign])
    assert judging.engine == "shared"
    units = NeuronSet([Neuron(0, 1), Neuron(1, 2)], hook="mlp_post")
    # the patch's source is the target: its pass runs whole, the judged responses with it (SourceValues)
    arms: list[list[Edit]] = [[], [Scale(units, 0.0)], [Patch(units, source=sft, source_name="sft")]]
    for mine, theirs in zip(judging.arms(arms), plain.arms(arms), strict=True):
        for name in ("kl", "kl_unedited", "reference_logprob", "reference_unedited", "margin", "margin_unedited"):
            np.testing.assert_array_equal(getattr(mine, name), getattr(theirs, name))
    nll, kl_rows = judging.target_nll(), plain.target_nll()
    keys = {(s.ids[: -s.n_response], s.ids[-s.n_response :]): s for s in others}
    assert set(nll) == set(kl_rows) | set(keys)
    assert all(nll[key] == kl_rows[key] for key in kl_rows)
    for (prompt, response), seq in keys.items():
        perplexity, tokens = output_perplexity(sft, [prompt], [response])
        assert tokens == seq.n_response
        assert nll[(prompt, response)] == pytest.approx(math.log(perplexity) * tokens, rel=1e-5)


def test_planted_units_close_the_whole_gap_and_placebos_do_not(
    pairs: dict[str, tuple[Path, Path]], chat_data: Path
) -> None:
    sft_dir, dpo_dir = pairs["planted"]
    planted = read_planted(dpo_dir.parent)
    sft, dpo = _load(sft_dir), _load(dpo_dir)
    tokenizer = AutoTokenizer.from_pretrained(sft_dir)
    test = read_test_rows(chat_data / "test.jsonl")[:6]
    rows = outcome_rows(tokenizer, test, "reference", data_file=chat_data / "test.jsonl")
    units = NeuronSet([Neuron(layer, unit) for layer, unit in planted.units], hook=planted.hook)
    for model, target, name in ((dpo, sft, "sft"), (sft, dpo, "dpo")):
        outcomes = Outcomes(model, target, rows, responses="reference")
        patch = Patch(units, source=target, source_name=name)
        closed = outcomes.arm([patch])
        assert (closed.kl_unedited > 1e-6).all()
        np.testing.assert_allclose(closed.gap_closed, 1.0, atol=1e-4)
        assert abs(gap_closed(closed.kl, closed.kl_unedited) - 1.0) < 1e-4
        placebos = patch.placebos(model, 5, seed=0)
        for placebo in placebos:
            assert isinstance(placebo, Patch)
            assert sorted(n.layer for n in placebo.units.neurons) == sorted(n.layer for n in units.neurons)
            assert gap_closed(*_kl(outcomes.arm([placebo]))) <= 0.1


def _kl(arm) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    return arm.kl, arm.kl_unedited


def test_response_choices(pairs: dict[str, tuple[Path, Path]], chat_data: Path, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(pairs["llama"][0])
    test = read_test_rows(chat_data / "test.jsonl")[:3]
    data = chat_data / "test.jsonl"
    reference = outcome_rows(tokenizer, test, "reference", data_file=data)
    texts = [row.reference for row in test]
    assert outcome_rows(tokenizer, test, "greedy", greedy=texts) == reference
    ids = [list(seq.ids[-seq.n_response :]) for seq in reference]
    assert outcome_rows(tokenizer, test, "greedy", greedy=ids) == reference
    write_responses_file(tmp_path / "r.jsonl", [texts[0], ids[1], texts[2]])
    assert outcome_rows(tokenizer, test, str(tmp_path / "r.jsonl")) == reference
    pair = read_dpo_rows(chat_data / "dpo.jsonl")[0]
    dpo_file = tmp_path / "dpo.jsonl"
    dpo_file.write_text(
        json.dumps(
            {
                "prompt": [{"role": t.role, "content": t.content} for t in test[0].question],
                "chosen": "Yes.",
                "rejected": pair.rejected,
            }
        )
        + "\n"
    )
    chosen = outcome_rows(tokenizer, test[:1], "chosen", data_file=data, dpo_file=dpo_file)
    assert chosen == [forced(tokenizer, test[0].question, "Yes.")]


@pytest.mark.parametrize(
    ("responses", "kwargs", "message"),
    [
        ("greedy", {}, "--responses greedy needs the target's greedy response of each of the 3 rows (got none)"),
        ("chosen", {}, "--response chosen needs the DPO pairs"),
        ("nope.jsonl", {}, "--responses nope.jsonl: expected greedy, reference, chosen, rejected or an existing"),
    ],
)
def test_response_choice_errors_are_one_line(
    pairs: dict[str, tuple[Path, Path]], chat_data: Path, responses: str, kwargs: dict[str, object], message: str
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(pairs["llama"][0])
    test = read_test_rows(chat_data / "test.jsonl")[:3]
    with pytest.raises(ProbeError) as caught:
        outcome_rows(tokenizer, test, responses, **kwargs)  # type: ignore[arg-type]
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_bad_files_and_sequences_are_one_line(
    pairs: dict[str, tuple[Path, Path]], chat_data: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(pairs["llama"][0])
    test = read_test_rows(chat_data / "test.jsonl")[:2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"response": "fine"}\n{"response": ""}\n')
    with pytest.raises(ProbeError, match=r"bad.jsonl:2: expected an object with a non-empty 'response'"):
        outcome_rows(tokenizer, test, str(bad))
    bad.write_text('{"response": "fine"}\n')
    with pytest.raises(ProbeError, match="1 responses for 2 test rows"):
        outcome_rows(tokenizer, test, str(bad))
    with pytest.raises(ProbeError, match="needs 1 to 2 response tokens"):
        Forced((1, 2, 3), 3)


@pytest.fixture(scope="module")
def engines(setup: Any) -> tuple[Any, ...]:
    """Both engines on KL rows whose responses differ from the references (each prompt with two responses, as in an
    A/B run: the target's greedy tokens and the reference), the references and a DPO pair; every arm of :func:`_arms`
    through the shared engine in one call of ``arms``, and its progress. Two prompts and one pair: each pass still
    spans several batches at 600 tokens (9 on the tiny Llama, 6 on the planted pair), which is what the engines batch
    differently."""
    _, sft, dpo, _, rows, dpo_pairs = setup
    rows, dpo_pairs = rows[:2], dpo_pairs[:1]
    greedy = [Forced((*seq.ids[: len(seq.ids) - seq.n_response], 5, 6, 7), 3) for seq in rows]
    made = {
        engine: Outcomes(dpo, sft, greedy, reference=rows, pairs=dpo_pairs, max_batch_tokens=600, engine=engine)
        for engine in ("shared", "per-arm")
    }
    arms = _arms(sft, dpo)
    seen: list[tuple[int, int]] = []
    together = made["shared"].arms(arms, progress=lambda done, total: seen.append((done, total)))
    return sft, dpo, made, arms, together, seen


def _arms(sft: PreTrainedModel, dpo: PreTrainedModel) -> list[list[Edit]]:
    layers, width = dpo.config.num_hidden_layers, dpo.config.intermediate_size
    upper = NeuronSet([Neuron(layers - 1, unit) for unit in range(0, width, 3)], hook="mlp_post")
    both = NeuronSet([Neuron(0, 2), Neuron(layers - 1, 5), Neuron(layers - 1, 7)], hook="mlp_out")
    patch = Patch(upper, source=sft, source_name="sft")
    return [
        [],
        [Scale(upper, 0.0)],
        [Scale(both, 1.0)],
        [patch],
        [*patch.placebos(dpo, 1, seed=0)],
        [Add("resid_post", layers - 1, tuple([0.5] * dpo.config.hidden_size))],
        [Scale(upper, 2.0), Patch(both, source=sft, source_name="sft")],
        [Expo(1.0, source=sft)],  # 7-9: the amplification kinds at their no-op doses
        [ExpoUnits(upper, 1.0, source=sft)],
        [Lda(0.0, source=sft)],
        [Expo(2.0, source=sft)],  # 10-12: and at doses that move
        [ExpoUnits(upper, 3.0, source=sft)],
        [Lda(1.0, source=sft)],
        [Lda(1.0, source=sft), Scale(upper, 0.0)],  # 13: a context with sites: the shared engine runs it
        [Expo(2.0, source=sft), Patch(both, source=sft, source_name="sft")],  # 14: two contexts: whole forwards
        [Expo(1.0, source=sft), Lda(0.0, source=sft)],  # 15: a no-op left to whole forwards
    ]


NOOPS = (0, 2, 7, 8, 9)  # arms that change no value: the unedited numbers, bit for bit


def test_shared_engine_matches_the_full_forward_engine(engines) -> None:  # type: ignore[no-untyped-def]
    """The shared engine (prompts once, arms from their fork layer, patch sources once per batch) gives the outcomes of
    one whole forward per sequence and arm to float rounding: KL to rtol 1e-5, mean log-probs and margins to 1e-5."""
    _, _, made, arms, shared, _ = engines
    full = [made["per-arm"].arm(edits) for edits in arms]
    for s, f, edits in zip(shared, full, arms, strict=True):
        for field in ("kl", "kl_unedited"):
            np.testing.assert_allclose(getattr(s, field), getattr(f, field), rtol=1e-5, atol=1e-7, err_msg=str(edits))
        for field in ("reference_logprob", "reference_unedited", "margin", "margin_unedited"):
            np.testing.assert_allclose(getattr(s, field), getattr(f, field), rtol=1e-5, atol=1e-5, err_msg=str(edits))
    assert (shared[1].kl != shared[0].kl).all() and (shared[3].kl != shared[0].kl).all()


def test_shared_engine_identities_hold_bit_for_bit(engines) -> None:  # type: ignore[no-untyped-def]
    """An arm that changes nothing reproduces the unedited numbers exactly, whether it starts at block 0 or at the top
    block, alone or among other arms; every arm gives the same numbers in one call of ``arms`` as alone."""
    _, _, made, arms, together, seen = engines
    outcomes = made["shared"]
    assert [done for done, _ in seen] == list(range(1, seen[-1][1] + 1))  # every batch of every pass, counted once
    alone = [outcomes.arm(edits) for edits in arms]
    for a, b in zip(together, alone, strict=True):
        for field in ("kl", "kl_unedited", "reference_logprob", "margin"):
            assert np.array_equal(getattr(a, field), getattr(b, field))
    unedited = together[0]
    for k in NOOPS:  # scale by 1, and expo / expo-units at alpha 1 and lda at alpha 0 (issue 39: these read 1e-5)
        nothing = together[k]
        assert (nothing.kl == nothing.kl_unedited).all() and (nothing.gap_closed == 0.0).all(), arms[k]
        assert (nothing.reference_change == 0.0).all() and (nothing.margin_change == 0.0).all(), arms[k]
        for field in ("kl", "kl_unedited", "reference_logprob", "margin"):
            assert np.array_equal(getattr(nothing, field), getattr(unedited, field)), (arms[k], field)
    for k in range(len(arms) - 1):
        if k not in NOOPS:
            assert (together[k].kl != unedited.kl).any(), arms[k]
    for whole in (together[14], together[15]):  # left to whole forwards: measured against whole forwards' unedited
        np.testing.assert_allclose(whole.kl_unedited, unedited.kl_unedited, rtol=1e-5, atol=1e-7)
    nothing = together[15]
    assert (nothing.gap_closed == 0.0).all() and (nothing.kl == nothing.kl_unedited).all()
    assert (nothing.reference_change == 0.0).all() and (nothing.margin_change == 0.0).all()
    assert together[2].stats["values_seen"] > 0 and together[2].stats["values_changed"] == 0

"""Weight FLOPs: what a stage's matrix products compute at the least, and how fast this machine computes them.

A stage's *floor* is the time its weight FLOPs take at the rate this machine sustains for the model's own matrix
products: 2 FLOPs per parameter a token meets, a backward pass twice its forward. Attention over the context, norms,
activations, embedding lookups and everything else count as free, so no engine computing the same passes goes below
it. Each stage says its work (:class:`TokenPasses`) from the counts its estimate uses (:mod:`study.floors`); the model's
matrices are read from its safetensors headers (:meth:`Weights.of`), nothing loaded; :func:`matmul_rate` measures
the machine once, on one block's matrices, in the stages' dtype and thread count.

Example:
    >>> weights = Weights(layers=30, block=3_538_944, head=28_311_552, shapes=((576, 576),))
    >>> work = TokenPasses(blocks=1000.0, heads=10.0) + TokenPasses(blocks=500.0)  # through every block; logits
    >>> round(work.flops(weights) / 1e9, 1)   # 2 x (1500 x 30 x block + 10 x head), in GFLOP
    319.1
    >>> shared_passes(fork=11, passes=3, layers=30)   # 3 passes sharing blocks 0-10: 11 + 3 x 19 blocks
    2.2666666666666666
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

BACKWARD = 2.0  # a backward pass's weight FLOPs over its forward's (the gradients of the inputs and of the weights)
RATE_ROWS = 1024  # rows of the rate's matrix products: a prompt pass's (core.budget.CPU_MAX_BATCH_TOKENS is 2048)
RATE_SECONDS = 3.0  # how long the rate is measured (matmul_rate)
_BLOCK_ZERO = re.compile(r"\.(?:layers|h|blocks)\.0\.")  # the first decoder block's tensors, by their name


@dataclass(frozen=True)
class Weights:
    """A model's matrix products: its blocks, one block's parameters in them, the LM head's, one block's shapes."""

    layers: int
    block: int
    head: int
    shapes: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, model_dir: str | Path) -> Weights:
        """From ``model_dir``'s ``config.json`` and safetensors headers (the first block's 2-D tensors; the head is
        ``vocab_size x hidden_size``, tied or not)."""
        folder = Path(model_dir)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        shapes: list[tuple[int, int]] = []
        for path in sorted(folder.glob("*.safetensors")):
            with path.open("rb") as handle:
                header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
            shapes += [
                (int(v["shape"][0]), int(v["shape"][1]))
                for k, v in sorted(header.items())
                if k != "__metadata__" and _BLOCK_ZERO.search(k) and len(v["shape"]) == 2
            ]
        hidden = int(config["hidden_size"])
        if not shapes:  # no safetensors: a Llama-shaped block from the config
            inner = int(config.get("intermediate_size") or 4 * hidden)
            shapes = [(hidden, hidden)] * 4 + [(inner, hidden), (inner, hidden), (hidden, inner)]
        return cls(
            layers=int(config["num_hidden_layers"]),
            block=sum(a * b for a, b in shapes),
            head=int(config["vocab_size"]) * hidden,
            shapes=tuple(shapes),
        )

    @property
    def parameters(self) -> int:
        """The parameters of every matrix product: the blocks' and the head's."""
        return self.layers * self.block + self.head


# SmolLM2-135M's (the default pair's): the reference of the estimates' paces (core.pace.machine_pace)
SMOLLM2_135M = Weights(
    layers=30,
    block=3_538_944,
    head=28_311_552,
    shapes=((576, 1536), (1536, 576), (1536, 576), (192, 576), (576, 576), (576, 576), (192, 576)),
)


@dataclass(frozen=True)
class TokenPasses:
    """Token passes through a model's matrix products: ``blocks`` counts a token through every block as 1 (through
    some of them as their share), ``heads`` the tokens whose logits are computed."""

    blocks: float = 0.0
    heads: float = 0.0

    def __add__(self, other: TokenPasses) -> TokenPasses:
        return TokenPasses(self.blocks + other.blocks, self.heads + other.heads)

    def flops(self, weights: Weights) -> float:
        """Its weight FLOPs: 2 per parameter a token meets."""
        return 2.0 * (self.blocks * weights.layers * weights.block + self.heads * weights.head)


def shared_passes(fork: int, passes: int, layers: int) -> float:
    """A token's blocks, in whole passes, for ``passes`` passes that share the blocks below ``fork`` (the lowest
    block any of them edits) and run the rest each."""
    return (fork + passes * (layers - fork)) / layers


def matmul_rate(
    weights: Weights, threads: int | None = None, rows: int = RATE_ROWS, seconds: float = RATE_SECONDS
) -> float:
    """FLOP/s one block's matrix products on ``rows`` rows in float32 (the stages' CPU dtype) sustain over
    ``seconds`` after a warm-up, at ``threads`` torch threads (default: this process's). Sustained, not the best
    single pass: on the project's shared 2-core machine the best of five passes read 68-145 GFLOP/s within one
    afternoon, three seconds of passes 97-110 within minutes (2026-11-29), and a stage runs for minutes."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        matrices = [torch.randn(out, into) for out, into in weights.shapes]
        inputs = {into: torch.randn(rows, into) for _, into in weights.shapes}
        flops = sum(2.0 * rows * m.numel() for m in matrices)

        def one_pass() -> None:
            for matrix in matrices:
                inputs[matrix.shape[1]] @ matrix.T

        with torch.inference_mode():
            one_pass()  # warm-up
            passes, start = 0, time.perf_counter()
            while passes == 0 or time.perf_counter() - start < seconds:
                one_pass()
                passes += 1
            return flops * passes / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)

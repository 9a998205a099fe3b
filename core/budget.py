"""How many padded tokens one forward may hold: the budget recording and shared generation batch by.

On a GPU the budget follows the free memory; on a CPU it is a fixed size past which a batch is
no faster (larger batches of long prompts are slower still on the 2-core machine).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

# Past about this many padded tokens a batch is no faster, while a wider batch spans more prompt
# lengths and so pads more: measured on an H100 with the 8B shape, and on the 2-core CPU with the
# SmolLM2 pair, where smaller batches of long prompts are faster still (docs/probes.md).
MAX_USEFUL_BATCH_TOKENS = 8192
CPU_MAX_BATCH_TOKENS = 2048
# Fraction of the free GPU memory (after both models are loaded) a batch may use; the rest
# covers the allocator's fragmentation, kernels' workspaces and the estimate's error.
GPU_MEMORY_FRACTION = 0.5
_ROUND = 256  # budgets derived from free memory are rounded down, so that they are the same from call to call


def activation_bytes_per_token(config: PreTrainedConfig, dtype_bytes: int, longest: int) -> int:
    """Peak transient memory of one padded token inside one decoder block.

    A block holds, at its peak, the residual stream and its normed copy, q/k/v and the
    attention output (about 6 hidden-size vectors) and the MLP's gate, up and activated
    products (3 intermediate-size vectors); blocks run one after another, so depth does not
    add up. The attention mask adds a float32 row of ``longest`` per token. Measured on an
    H100 (``benchmarks/bench_probes.py``, part 2): 118 KiB per token for the 8B shape in bf16
    against 136 KiB estimated; 10.7 against 8.4 for a tiny model, where small buffers the
    estimate leaves out weigh more (the budget keeps half the free memory in reserve).
    """
    hidden = int(config.hidden_size)
    intermediate = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    return dtype_bytes * (6 * hidden + 3 * intermediate) + 4 * longest


def default_max_batch_tokens(device: str, config: PreTrainedConfig, dtype_bytes: int, longest: int) -> int:
    """The budget for a device: :data:`CPU_MAX_BATCH_TOKENS` on CPU; on a GPU :data:`MAX_USEFUL_BATCH_TOKENS`,
    less where free memory is short.

    Under ``device_map="auto"`` the model spans every visible GPU; the one with least free
    memory decides.
    """
    if not (device.startswith("cuda") or device == "auto"):
        return CPU_MAX_BATCH_TOKENS
    import torch

    if not torch.cuda.is_available():
        return CPU_MAX_BATCH_TOKENS
    indices = [torch.device(device).index or 0] if device.startswith("cuda") else list(range(torch.cuda.device_count()))
    free = min(torch.cuda.mem_get_info(i)[0] for i in indices)
    budget = int(GPU_MEMORY_FRACTION * free) // activation_bytes_per_token(config, dtype_bytes, longest)
    return max(_ROUND, min(MAX_USEFUL_BATCH_TOKENS, budget // _ROUND * _ROUND))


# Shared generation's key/value caches on a CPU. The default evaluation's batches need 2.53 GiB to take their decode
# steps as one group (SmolLM2, the held-out split's 162 rows, 64 new tokens): 2 to 3.5 s less per model than two
# groups, the same responses, a peak RSS of 5.1 GB against 4.5 (docs/report.md). A 16 GB laptop keeps room for the rest.
CPU_CACHE_BYTES = 3 * 2**30
GPU_CACHE_FRACTION = 0.25  # of the free GPU memory, after the model is loaded


def default_cache_bytes(device: str) -> int:
    """How many bytes of key/value cache shared generation may hold at once on ``device``."""
    if not device.startswith("cuda"):
        return CPU_CACHE_BYTES
    import torch

    index = torch.device(device).index or 0
    return max(_ROUND * 2**20, int(GPU_CACHE_FRACTION * torch.cuda.mem_get_info(index)[0]))

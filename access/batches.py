"""A left-padded batch of token ids, as every driver runs it: ids, mask, positions and the tokens a capture reduces."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenBatch:
    """The tensors one forward takes; :class:`probes.prompts.Batch` adds which prompts they are."""

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long, 0 on left padding
    position_ids: torch.Tensor  # [B, T] long, 0 at the first real token
    response_mask: torch.Tensor | None = None  # [B, T] long, 1 on the teacher-forced response tokens

    @property
    def reduce_mask(self) -> torch.Tensor:
        """The tokens a position policy reduces over: the response tokens when there are any, else the real tokens."""
        return self.attention_mask if self.response_mask is None else self.response_mask


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] position of each real token counted from the row's first real token; 0 on padding.

    >>> position_ids_for(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])).tolist()
    [[0, 0, 0, 1], [0, 1, 2, 3]]
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)

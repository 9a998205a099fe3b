"""Shared decoding's batch state: every arm's rows of one batch of prompts, their groups, and how groups fork.

:class:`access.decode_step.BatchDecoder` decodes one batch of prompts for a chunk of arms; :class:`DecodeBatch` is
what it carries from step to step:

* **rows.** Each (arm, prompt) is one row of the upper blocks (the fork layer and above), kept arm-major, so an
  arm's rows are one slice (:attr:`DecodeBatch.spans`) and its site functions run on that slice unchanged.
* **groups.** Rows with the same tokens so far form one group; the blocks below the fork layer (and each patch
  source) run once per group. When a group's live rows choose different tokens, it forks (:meth:`regroup`), and the
  caches of the lower blocks copy its rows.
* **finished rows** (a stop token, or the token limit) stop decoding; their rows and groups leave the caches at the
  step they finish, the rows still decoding kept in their places and the last ones moved into the gaps
  (:func:`settled`), so a cache copies only the rows that move.

Example:
    >>> import torch
    >>> ids, mask = torch.tensor([[5], [6]]), torch.ones(2, 1, dtype=torch.long)
    >>> batch = DecodeBatch.start([0, 1], ids, mask, torch.tensor([0, 0]))   # two arms, two prompts
    >>> batch.row_group, batch.spans
    ([0, 1, 0, 1], {0: (0, 2), 1: (2, 4)})
    >>> batch.take(chosen=[7, 8, 7, 9], bad=[False] * 4, stop=(2,), limit=4)
    >>> batch.regroup([7, 8, 7, 9])   # prompt 1's arms chose 8 and 9: its group forks
    >>> batch.row_group, batch.group_input.tolist()
    ([0, 1, 0, 2], [[7], [8], [9]])
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import torch

from access.kv_cache import select_rows


@dataclass
class DecodeBatch:
    """The state of one batch of prompts while its arms decode."""

    prompt_mask: torch.Tensor  # [B, T + step]: the prompts' padding, then the generated tokens
    last_position: torch.Tensor  # [B]: each prompt's last position
    arms: list[int]  # the passes decoding here, in row order
    row_arm: list[int]  # per row (arm-major)
    row_prompt: list[int]
    row_group: list[int]
    row_alive: list[bool]
    group_prompt: list[int]
    group_input: torch.Tensor  # [G, q]: the tokens each group feeds next
    tokens: list[list[list[int]]]  # [arm][prompt] -> generated ids (arm: its place in ``arms``)
    broken: list[int]  # [arm] positions whose logits were broken (inf/NaN, or flat)
    lower: Any = None  # DynamicCache of the blocks below the fork layer, one row per group
    upper: Any = None  # DynamicCache of the fork layer and above, one row per row
    # per patch source: DynamicCache of its blocks up to its top site, per group
    sources: list[Any] = field(default_factory=list)
    source_needed: set[int] = field(default_factory=set)  # the patch sources these arms read
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # arm -> its rows
    # arm -> what its site functions saw on these rows (counts left on the device: int() them when done)
    counts: dict[int, dict[str, Any]] = field(default_factory=dict)
    # the forward running now: row_group as a tensor, and its first row among the batch's (a prompt pass runs in
    # slices of rows)
    row_group_index: torch.Tensor | None = None
    offset: int = 0

    @classmethod
    def start(
        cls,
        arms: list[int],
        inputs: torch.Tensor,
        mask: torch.Tensor,
        last: torch.Tensor,
        source_needed: Collection[int] = (),
    ) -> DecodeBatch:
        """Every arm's row of each prompt of ``inputs`` (arm-major), each prompt its own group."""
        n = inputs.shape[0]
        batch = cls(
            prompt_mask=mask,
            last_position=last,
            arms=list(arms),
            row_arm=[a for a in arms for _ in range(n)],
            row_prompt=list(range(n)) * len(arms),
            row_group=list(range(n)) * len(arms),
            row_alive=[True] * (len(arms) * n),
            group_prompt=list(range(n)),
            group_input=inputs,
            tokens=[[[] for _ in range(n)] for _ in arms],
            broken=[0] * len(arms),
            source_needed=set(source_needed),
        )
        batch._set_spans()
        return batch

    def take(self, chosen: list[int], bad: list[bool], stop: Collection[int], limit: int) -> None:
        """Each live row's chosen token: kept, or (a stop token) the row's end; a row ends at ``limit`` tokens too."""
        local = {arm: k for k, arm in enumerate(self.arms)}
        for row, (token, is_bad) in enumerate(zip(chosen, bad, strict=True)):
            if not self.row_alive[row]:
                continue
            arm, prompt = local[self.row_arm[row]], self.row_prompt[row]
            self.broken[arm] += int(is_bad)
            if token in stop:
                self.row_alive[row] = False
                continue
            self.tokens[arm][prompt].append(token)
            if len(self.tokens[arm][prompt]) >= limit:
                self.row_alive[row] = False

    def went_on(self, chosen: list[int], bad: list[bool], stop: Collection[int], limit: int) -> bool:
        """:meth:`take` the step's tokens, then, while a row decodes on, :meth:`advance`: whether one does."""
        self.take(chosen, bad, stop, limit)
        if not any(self.row_alive):
            return False
        self.advance(chosen)
        return True

    def advance(self, chosen: list[int]) -> None:
        """One more position for every prompt, fed each group's chosen token (:meth:`regroup`)."""
        self.prompt_mask = torch.cat([self.prompt_mask, self.prompt_mask.new_ones(self.prompt_mask.shape[0], 1)], dim=1)
        self.regroup(chosen)

    def regroup(self, chosen: list[int]) -> None:
        """Fork each group whose live rows chose different tokens; drop finished rows."""
        # (source group, next token) per new group, group by group: where no group forks, every group keeps its
        # place, and the caches are not copied
        entries: list[tuple[int, int]] = []
        where: dict[tuple[int, int], int] = {}
        first_of: dict[int, int] = {}
        rows_of: list[list[int]] = [[] for _ in self.group_prompt]
        for row, group in enumerate(self.row_group):
            if self.row_alive[row]:
                rows_of[group].append(row)
        for group, rows in enumerate(rows_of):
            for row in rows:
                if (group, chosen[row]) not in where:
                    where[(group, chosen[row])] = len(entries)
                    first_of.setdefault(group, len(entries))
                    entries.append((group, chosen[row]))
            if group not in first_of:  # its rows all finished: fed its last token until they are dropped
                first_of[group] = len(entries)
                entries.append((group, int(self.group_input[group, -1].item())))
        self.row_group = [
            where.get((g, chosen[r]), first_of[g]) if self.row_alive[r] else first_of[g]
            for r, g in enumerate(self.row_group)
        ]
        sources = [group for group, _ in entries]
        if sources != list(range(len(self.group_prompt))):
            for cache in [self.lower, *self.sources]:
                select_rows(cache, sources, self.group_input.device)
        self.group_prompt = [self.group_prompt[g] for g in sources]
        self.group_input = torch.tensor([[token] for _, token in entries], device=self.group_input.device)
        if not all(self.row_alive):
            self._compact()

    def _compact(self) -> None:
        keep: list[int] = []
        for start, end in self.spans.values():  # arm by arm, each arm's rows still one slice
            keep += settled([row for row in range(start, end) if self.row_alive[row]], len(keep))
        select_rows(self.upper, keep, self.group_input.device)
        groups = settled(sorted({self.row_group[row] for row in keep}), 0)
        renumber = {old: new for new, old in enumerate(groups)}
        if groups != list(range(len(self.group_prompt))):
            for cache in [self.lower, *self.sources]:
                select_rows(cache, groups, self.group_input.device)
            self.group_prompt = [self.group_prompt[g] for g in groups]
            self.group_input = self.group_input[groups]
        self.row_arm = [self.row_arm[r] for r in keep]
        self.row_prompt = [self.row_prompt[r] for r in keep]
        self.row_group = [renumber[self.row_group[r]] for r in keep]
        self.row_alive = [True] * len(keep)
        self._set_spans()

    def _set_spans(self) -> None:
        self.spans = {}
        for row, arm in enumerate(self.row_arm):
            start, _ = self.spans.get(arm, (row, row))
            self.spans[arm] = (start, row + 1)


def settled(rows: list[int], start: int) -> list[int]:
    """``rows`` (in order) as the rows from ``start`` on, each of them already in that range kept where it is and
    the others filling the gaps in order: a cache keeping them copies only the rows that move
    (:func:`access.kv_cache.select_rows`)."""
    end = start + len(rows)
    staying = {row for row in rows if start <= row < end}
    moving = iter(row for row in rows if row not in staying)
    return [place if place in staying else next(moving) for place in range(start, end)]

"""Each member's own data order, batched in step: step i holds every member's i-th batch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import RandomSampler


class MemberBatches:
    """K shuffled passes over in-memory tensors, one per member, gathered as ``[K, B, ...]``.

    Member k's order comes from its own generator, drawn as a ``DataLoader``
    with ``shuffle=True, generator=...`` draws it (its worker seed, then its
    sampler's permutation), so a member sees the batches its unfused twin sees.
    The gather is one indexing operation per tensor per step, not K.
    """

    def __init__(
        self,
        tensors: Sequence[torch.Tensor],
        batch_size: int,
        generators: Sequence[torch.Generator],
        *,
        drop_last: bool = False,
    ) -> None:
        if not tensors or any(len(t) != len(tensors[0]) for t in tensors):
            raise ValueError("MemberBatches needs tensors of one length")
        self.tensors = list(tensors)
        self.batch_size = batch_size
        self.generators = list(generators)
        self.drop_last = drop_last

    def __len__(self) -> int:
        n = len(self.tensors[0])
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        n = len(self.tensors[0])
        orders = []
        for generator in self.generators:
            # What a DataLoader's iterator draws first: its workers' base seed.
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            orders.append(torch.tensor(list(RandomSampler(range(n), generator=generator))))
        self._order = torch.stack(orders)
        self._rows: torch.Tensor | None = None  # all of this epoch's members
        stop = n - n % self.batch_size if self.drop_last else n
        for start in range(0, stop, self.batch_size):
            order = self._order if self._rows is None else self._order[self._rows]
            index = order[:, start : start + self.batch_size]
            yield tuple(t[index.to(t.device)] for t in self.tensors)

    def select(self, keep: Sequence[int]) -> None:
        """Keep the members at positions ``keep``, from the next batch on."""
        self.generators = [self.generators[k] for k in keep]
        if hasattr(self, "_order"):
            rows = torch.arange(len(self._order)) if self._rows is None else self._rows
            self._rows = rows[torch.as_tensor(list(keep), dtype=torch.long)]

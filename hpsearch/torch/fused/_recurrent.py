"""K ``nn.LSTM`` layers as one: stacked weights, one batched product per time step.

``torch.func.vmap`` cannot map ``nn.LSTM`` over packed sequences, so a fused LSTM
runs the recurrence itself: each step's gates for all K members in one batched
matrix product, the cell update as ``nn.LSTM`` computes it. Each member's
sequences keep their own lengths: a sequence's state stops changing after its
last step, so a member padded to the group's longest batch ends with the hidden
state it has alone, unpacked or packed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from hpsearch.torch.fused._layers import FusedDropout, FusedModule, _stacked


class FusedLSTM(FusedModule):
    """K ``nn.LSTM(..., batch_first=True)`` of one shape: inputs ``[K, B, T, features]``.

    ``forward(x, lengths)`` returns ``(output, (h_n, c_n))`` as ``nn.LSTM`` does,
    with the member axis first: ``output [K, B, T, hidden]`` (zero after each
    sequence's length, as a packed sequence unpacks), ``h_n`` and ``c_n``
    ``[K, layers, B, hidden]`` (each sequence's state at its last step).
    ``lengths [K, B]`` are each member's sequence lengths (left out: all ``T``).

    Between layers, dropout (``nn.LSTM``'s ``dropout``) applies each member's
    rate; with ``generators`` its masks are drawn from the member's own stream,
    of the same distribution as ``nn.LSTM``'s but not its masks. Unidirectional
    LSTMs without projections only.

    Raises:
        TypeError: a bidirectional LSTM, one with ``proj_size``, or one not
            ``batch_first``.
    """

    def __init__(
        self, layers: Sequence[nn.LSTM], generators: Sequence[torch.Generator] | None = None
    ) -> None:
        super().__init__()
        first = layers[0]
        if first.bidirectional or first.proj_size or not first.batch_first:
            raise TypeError("a fused LSTM is unidirectional, batch_first, without proj_size")
        self.members = len(layers)
        self.num_layers = first.num_layers
        self.hidden_size = first.hidden_size
        self.bias = first.bias
        # Between layers, as FusedDropout does for nn.Dropout (it leaves with its members).
        self.between = FusedDropout([nn.Dropout(lstm.dropout) for lstm in layers], generators)
        for layer in range(self.num_layers):
            # [K, in, 4H] and [K, H, 4H]: x @ W^T as one bmm, without a transpose per step.
            for kind in ("ih", "hh"):
                name = f"weight_{kind}_l{layer}"
                setattr(self, name, _stacked([getattr(lstm, name).t() for lstm in layers]))
                if self.bias:
                    bias = f"bias_{kind}_l{layer}"
                    setattr(self, bias, _stacked([getattr(lstm, bias) for lstm in layers]))

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        k, batch, steps = x.shape[0], x.shape[1], x.shape[2]
        size = self.hidden_size
        valid = None
        if lengths is not None:
            lengths = lengths.to(x.device)
            steps = min(steps, int(lengths.max()))  # past the longest, nothing changes
            at = torch.arange(steps, device=x.device)
            valid = (at < lengths.unsqueeze(-1)).unsqueeze(-1)  # [K, B, T, 1]
            x = x[:, :, :steps]
        last_h, last_c = [], []
        for layer in range(self.num_layers):
            w_ih = getattr(self, f"weight_ih_l{layer}")
            w_hh = getattr(self, f"weight_hh_l{layer}")
            # Every step's input gates at once; the recurrence adds the hidden's per step.
            flat = x.reshape(k, batch * steps, x.shape[-1])
            if self.bias:
                b_ih = getattr(self, f"bias_ih_l{layer}")
                b_hh = getattr(self, f"bias_hh_l{layer}").unsqueeze(1)
                gates_in = torch.baddbmm(b_ih.unsqueeze(1), flat, w_ih)
            else:
                gates_in = torch.bmm(flat, w_ih)
            gates_in = gates_in.reshape(k, batch, steps, 4 * size)
            h = x.new_zeros(k, batch, size)
            c = x.new_zeros(k, batch, size)
            outputs = []
            for t in range(steps):
                hidden = torch.baddbmm(b_hh, h, w_hh) if self.bias else torch.bmm(h, w_hh)
                # As aten's LSTM cell: (W_hh h + b_hh) + (W_ih x + b_ih), gates i, f, g, o.
                i, f, g, o = (hidden + gates_in[:, :, t]).chunk(4, dim=-1)
                c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h_next = torch.sigmoid(o) * torch.tanh(c_next)
                if valid is None:
                    h, c = h_next, c_next
                    outputs.append(h)
                else:
                    here = valid[:, :, t]
                    h = torch.where(here, h_next, h)
                    c = torch.where(here, c_next, c)
                    outputs.append(h_next * here)
            x = torch.stack(outputs, dim=2)
            last_h.append(h)
            last_c.append(c)
            if layer < self.num_layers - 1:
                x = self.between(x)
        return x, (torch.stack(last_h, dim=1), torch.stack(last_c, dim=1))

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        state: dict[str, torch.Tensor] = {}
        for layer in range(self.num_layers):
            for kind in ("ih", "hh"):
                name = f"weight_{kind}_l{layer}"
                state[name] = getattr(self, name)[member].t()
                if self.bias:
                    bias = f"bias_{kind}_l{layer}"
                    state[bias] = getattr(self, bias)[member]
        return state

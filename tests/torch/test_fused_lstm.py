"""A fused LSTM computes what each member's ``nn.LSTM`` computes over its packed sequences."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from hpsearch.torch.fused import FusedLSTM, keep

K, B, T, FEATURES, HIDDEN = 3, 5, 9, 4, 6


def _lstms(layers: int) -> list[nn.LSTM]:
    torch.manual_seed(0)
    return [nn.LSTM(FEATURES, HIDDEN, num_layers=layers, batch_first=True) for _ in range(K)]


def _alone(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, (h, c) = lstm(packed)
    padded, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return padded, h, c


@pytest.mark.parametrize("layers", [1, 2])
def test_outputs_states_and_gradients_equal_each_members_packed_lstm(layers: int) -> None:
    lstms = _lstms(layers)
    fused = FusedLSTM(lstms)
    x = torch.randn(K, B, T, FEATURES)
    # Each member's own lengths; the longest of member 1 is shorter than T (padding only).
    lengths = torch.tensor([[9, 3, 5, 1, 7], [4, 2, 6, 6, 3], [9, 9, 8, 2, 5]])
    out, (h, c) = fused(x, lengths)
    alone = [_alone(lstm, x[k], lengths[k]) for k, lstm in enumerate(lstms)]
    torch.testing.assert_close(out, torch.stack([a[0] for a in alone]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h, torch.stack([a[1] for a in alone]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c, torch.stack([a[2] for a in alone]), rtol=1e-5, atol=1e-6)

    losses = [h[:, -1].pow(2).sum()] + [a[1][-1].pow(2).sum() for a in alone]
    torch.autograd.backward(losses)
    for k, lstm in enumerate(lstms):
        for name, param in lstm.named_parameters():
            fused_grad, grad = fused.get_parameter(name).grad, param.grad
            assert fused_grad is not None
            assert grad is not None
            expected = grad if name.startswith("bias") else grad.t()
            torch.testing.assert_close(fused_grad[k], expected, rtol=1e-5, atol=1e-6)


def test_without_lengths_every_step_counts() -> None:
    lstms = _lstms(1)
    x = torch.randn(K, B, T, FEATURES)
    out, (h, _) = FusedLSTM(lstms)(x)
    for k, lstm in enumerate(lstms):
        expected_out, (expected_h, _) = lstm(x[k])
        torch.testing.assert_close(out[k], expected_out, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(h[k], expected_h, rtol=1e-5, atol=1e-6)


def test_a_member_leaves_and_its_state_is_the_lstms_own() -> None:
    lstms = _lstms(2)
    fused = FusedLSTM(lstms)
    for k, lstm in enumerate(lstms):
        state = fused.member_state_dict(k)
        assert set(state) == set(lstm.state_dict())
        for name, value in lstm.state_dict().items():
            assert torch.equal(state[name], value)
    keep([2, 0], fused)
    assert fused.members == 2
    x = torch.randn(2, B, T, FEATURES)
    _, (h, _) = fused(x)
    torch.testing.assert_close(h[0], lstms[2](x[0])[1][0], rtol=1e-5, atol=1e-6)
    # A checkpoint of one member loads into another's place.
    fused.load_member_state_dict(1, lstms[1].state_dict())
    _, (h, _) = fused(x)
    torch.testing.assert_close(h[1], lstms[1](x[1])[1][0], rtol=1e-5, atol=1e-6)


def test_bidirectional_lstms_are_refused() -> None:
    with pytest.raises(TypeError, match="unidirectional"):
        FusedLSTM([nn.LSTM(2, 3, batch_first=True, bidirectional=True)])

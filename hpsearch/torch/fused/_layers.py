"""K copies of one architecture as one module: parameters stacked along a leading member axis.

:func:`fuse` walks K modules of one structure side by side. Layers it knows
become fused layers (one batched matmul for K linear layers, one grouped
convolution for K convolutions, per-member dropout rates); an activation or
a reshape applies to the K batches as they are; any other module (a user's
class with its own ``forward``) runs through ``torch.func``: its K parameter
sets stacked with ``stack_module_state`` and its forward mapped with ``vmap``.
The fused layers are the faster of the two where they apply (measured by
``scripts/bench_fusion.py``); ``vmap`` is what makes any architecture fusable.

Every fused module takes and returns tensors with the member axis first:
``[K, batch, ...]``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F

Method = Literal["layers", "vmap"]

# Modules without state that act on each element (or each sample's last axis),
# so K stacked batches go through them unchanged.
_PASS_THROUGH: tuple[type[nn.Module], ...] = (
    nn.Identity,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Sigmoid,
    nn.Tanh,
    nn.Softplus,
    nn.Hardswish,
    nn.Hardtanh,
    nn.Softmax,
    nn.LogSoftmax,
)


class FusedModule(nn.Module):
    """A module that runs K members at once: inputs and outputs carry a leading member axis.

    A fused module holds each member's parameters stacked along axis 0 of its own
    parameters, so an optimizer over them updates all members in one operation.
    """

    members: int

    def select(self, keep: Sequence[int]) -> None:
        """Keep only the members at positions ``keep`` (in that order); the rest leave."""
        index = torch.as_tensor(list(keep), dtype=torch.long)
        for child in _fused_children(self):
            child.select(keep)
        _select_own(self, index)
        self.members = len(index)

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        """Member ``member``'s state, named as the unfused module names it (its ``state_dict``)."""
        raise NotImplementedError

    def load_member_state_dict(self, member: int, state: dict[str, torch.Tensor]) -> None:
        """Load an unfused module's ``state_dict`` into member ``member``."""
        own = self.member_state_dict(member)
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if missing or unexpected:
            raise KeyError(f"member state: missing {missing}, unexpected {unexpected}")
        with torch.no_grad():
            for name, value in state.items():
                own[name].copy_(value)


def _fused_children(module: nn.Module) -> list[FusedModule]:
    """The nearest fused modules below ``module``, looking through plain containers."""
    found: list[FusedModule] = []
    for child in module.children():
        if isinstance(child, FusedModule):
            found.append(child)
        else:
            found.extend(_fused_children(child))
    return found


def _select_own(module: nn.Module, index: torch.Tensor) -> None:
    """Index this module's own (not its children's) stacked parameters and buffers."""
    for name, param in list(module.named_parameters(recurse=False)):
        setattr(module, name, _selected(param, index))
    for name, buffer in list(module.named_buffers(recurse=False)):
        if buffer is not None and buffer.dim() > 0:
            module.register_buffer(name, buffer.index_select(0, index.to(buffer.device)).clone())


def _selected(param: nn.Parameter, index: torch.Tensor) -> nn.Parameter:
    """A new parameter of ``index``'s rows (a new object: autograd keeps each leaf's shape,
    so an optimizer is handed the new parameters, see ``FusedOptimizer.select``)."""
    kept = nn.Parameter(param.detach().index_select(0, index.to(param.device)).clone())
    kept.requires_grad_(param.requires_grad)
    return kept


def _stacked(tensors: Sequence[torch.Tensor]) -> nn.Parameter:
    return nn.Parameter(torch.stack([t.detach() for t in tensors]).clone())


class FusedLinear(FusedModule):
    """K ``nn.Linear`` layers: one batched matrix product."""

    def __init__(self, layers: Sequence[nn.Linear]) -> None:
        super().__init__()
        self.members = len(layers)
        # [K, in, out]: x @ W^T as one bmm without a transpose per step.
        self.weight = _stacked([layer.weight.t() for layer in layers])
        self.bias = None if layers[0].bias is None else _stacked([lay.bias for lay in layers])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(shape[0], -1, shape[-1])
        if self.bias is None:
            out = torch.bmm(flat, self.weight)
        else:
            out = torch.baddbmm(self.bias.unsqueeze(1), flat, self.weight)
        return out.reshape(*shape[:-1], out.shape[-1])

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        state = {"weight": self.weight[member].t()}
        if self.bias is not None:
            state["bias"] = self.bias[member]
        return state


class FusedConv(FusedModule):
    """K ``nn.Conv1d``/``Conv2d``/``Conv3d`` layers: one grouped convolution."""

    def __init__(self, layers: Sequence[nn.Conv1d | nn.Conv2d | nn.Conv3d]) -> None:
        super().__init__()
        first = layers[0]
        if first.padding_mode != "zeros" or isinstance(first.padding, str):
            raise TypeError("fused convolutions take numeric zero padding")
        self.members = len(layers)
        self.groups = first.groups
        self.stride, self.padding, self.dilation = first.stride, first.padding, first.dilation
        self.conv: Callable[..., torch.Tensor] = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[
            len(first.kernel_size)
        ]
        self.weight = _stacked([layer.weight for layer in layers])
        biases = [layer.bias for layer in layers]
        self.bias = None if first.bias is None else _stacked([b for b in biases if b is not None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, batch = x.shape[0], x.shape[1]
        # [K, B, C, ...] -> [B, K*C, ...]: member k's channels are group k's.
        merged = x.transpose(0, 1).reshape(batch, k * x.shape[2], *x.shape[3:])
        weight = self.weight.reshape(-1, *self.weight.shape[2:])
        bias = None if self.bias is None else self.bias.reshape(-1)
        out = self.conv(
            merged, weight, bias, self.stride, self.padding, self.dilation, self.groups * k
        )
        return out.reshape(batch, k, -1, *out.shape[2:]).transpose(0, 1)

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        state = {"weight": self.weight[member]}
        if self.bias is not None:
            state["bias"] = self.bias[member]
        return state


class FusedLayerNorm(FusedModule):
    """K ``nn.LayerNorm`` layers: one normalisation, each member's own scale and shift."""

    def __init__(self, layers: Sequence[nn.LayerNorm]) -> None:
        super().__init__()
        first = layers[0]
        self.members = len(layers)
        self.normalized_shape = tuple(first.normalized_shape)
        self.eps = first.eps
        affine = first.weight is not None
        self.weight = _stacked([layer.weight for layer in layers]) if affine else None
        has_bias = affine and first.bias is not None
        self.bias = _stacked([layer.bias for layer in layers]) if has_bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.layer_norm(x, self.normalized_shape, eps=self.eps)
        view = (x.shape[0],) + (1,) * (x.dim() - 1 - len(self.normalized_shape))
        if self.weight is not None:
            out = out * self.weight.reshape(*view, *self.normalized_shape)
        if self.bias is not None:
            out = out + self.bias.reshape(*view, *self.normalized_shape)
        return out

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        state: dict[str, torch.Tensor] = {}
        if self.weight is not None:
            state["weight"] = self.weight[member]
        if self.bias is not None:
            state["bias"] = self.bias[member]
        return state


class FusedDropout(FusedModule):
    """K ``nn.Dropout`` layers, each member at its own rate.

    With ``generators`` (one per member), member k's mask is drawn from its own
    generator exactly as ``nn.Dropout`` draws it from torch's global one, so a
    member drops the units its unfused twin drops. Without them, one draw serves
    all members (faster; the same distribution, not the same masks).
    """

    def __init__(
        self, layers: Sequence[nn.Dropout], generators: Sequence[torch.Generator] | None = None
    ) -> None:
        super().__init__()
        self.members = len(layers)
        self.register_buffer("p", torch.tensor([float(layer.p) for layer in layers]))
        self.generators = None if generators is None else list(generators)

    def select(self, keep: Sequence[int]) -> None:
        super().select(keep)
        if self.generators is not None:
            self.generators = [self.generators[k] for k in keep]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.get_buffer("p")
        if not self.training or not bool((p > 0).any()):
            return x
        if self.generators is not None:
            outs = []
            for k, generator in enumerate(self.generators):
                rate = float(p[k])
                if rate == 0.0:
                    outs.append(x[k])
                    continue
                # As aten's CPU dropout: a Bernoulli(1-p) mask, scaled by 1/(1-p).
                noise = torch.empty_like(x[k]).bernoulli_(1 - rate, generator=generator)
                outs.append(x[k] * noise.div_(1 - rate))
            return torch.stack(outs)
        view = p.reshape(-1, *(1,) * (x.dim() - 1)).to(x.dtype)
        keep = (torch.rand_like(x) >= view).to(x.dtype)
        return x * keep / (1 - view)

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        return {}


class FusedFlatten(FusedModule):
    """K ``nn.Flatten`` layers: the same flattening, one axis further in."""

    def __init__(self, layer: nn.Flatten, members: int) -> None:
        super().__init__()
        self.members = members
        self.start = layer.start_dim + 1 if layer.start_dim >= 0 else layer.start_dim
        self.end = layer.end_dim + 1 if layer.end_dim >= 0 else layer.end_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(self.start, self.end)

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        return {}


class FusedPassThrough(FusedModule):
    """A stateless elementwise module, applied to all members' batches at once."""

    def __init__(self, layer: nn.Module, members: int) -> None:
        super().__init__()
        self.members = members
        self.inner = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)  # type: ignore[no-any-return]

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        return {}


class FusedSequential(FusedModule):
    """K ``nn.Sequential`` containers: their fused children in order."""

    def __init__(self, children: Sequence[FusedModule], names: Sequence[str]) -> None:
        super().__init__()
        self.members = children[0].members if children else 0
        self.names = list(names)
        self.layers = nn.ModuleList(children)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        state: dict[str, torch.Tensor] = {}
        for name, layer in zip(self.names, self.layers, strict=True):
            assert isinstance(layer, FusedModule)
            for key, value in layer.member_state_dict(member).items():
                state[f"{name}.{key}"] = value
        return state


class FusedVmap(FusedModule):
    """K modules of any architecture through ``torch.func``: stacked state, a vmapped forward.

    Dropout masks differ per member (``randomness="different"``) but are not the
    unfused module's masks; buffers (BatchNorm's running statistics) are read,
    not updated.
    """

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        super().__init__()
        from torch.func import stack_module_state

        self.members = len(modules)
        params, buffers = stack_module_state(list(modules))
        self.names = list(params)
        self.buffer_names = list(buffers)
        self.flat = nn.ParameterList([nn.Parameter(params[n].detach().clone()) for n in params])
        for i, name in enumerate(self.buffer_names):
            self.register_buffer(f"buffer{i}", buffers[name].clone())
        skeleton = copy.deepcopy(modules[0]).to("meta")
        self._skeleton = [skeleton]  # a list: not a submodule, so not moved or saved

    def select(self, keep: Sequence[int]) -> None:
        index = torch.as_tensor(list(keep), dtype=torch.long)
        for i, param in enumerate(self.flat):
            self.flat[i] = _selected(param, index)
        _select_own(self, index)
        self.members = len(index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.func import functional_call, vmap

        skeleton = self._skeleton[0]
        buffers = [getattr(self, f"buffer{i}") for i in range(len(self.buffer_names))]

        def one(params: list[torch.Tensor], bufs: list[torch.Tensor], xs: torch.Tensor) -> Any:
            state = dict(zip(self.names, params, strict=True))
            state.update(zip(self.buffer_names, bufs, strict=True))
            return functional_call(skeleton, state, (xs,))

        skeleton.train(self.training)
        out: torch.Tensor = vmap(one, randomness="different")(list(self.flat), buffers, x)
        return out

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        state = {n: p[member] for n, p in zip(self.names, self.flat, strict=True)}
        for i, name in enumerate(self.buffer_names):
            state[name] = getattr(self, f"buffer{i}")[member]
        return state


def fuse(
    modules: Sequence[nn.Module],
    *,
    method: Method = "layers",
    generators: Sequence[torch.Generator] | None = None,
) -> FusedModule:
    """One module running ``modules`` (K of one architecture) side by side.

    Args:
        modules: the members, each already initialised (with its own seed).
        method: ``"layers"`` fuses the layers it knows and maps the rest with
            ``vmap``; ``"vmap"`` maps the whole module with ``vmap``.
        generators: one per member, for dropout masks drawn as the unfused
            module draws them (see :class:`FusedDropout`).

    Raises:
        ValueError: the modules are not all of one structure and shape.
    """
    if not modules:
        raise ValueError("fuse needs at least one module")
    _check_same(modules)
    device = next((p.device for p in modules[0].parameters()), None)
    fused = _vmap_or_layers(modules, method, generators)
    return fused.to(device) if device is not None else fused


def _vmap_or_layers(
    modules: Sequence[nn.Module], method: Method, generators: Sequence[torch.Generator] | None
) -> FusedModule:
    first = modules[0]
    kind = type(first)
    if method == "vmap":
        return FusedVmap(modules)
    if kind is nn.Sequential:
        names = [name for name, _ in first.named_children()]
        children = [
            _vmap_or_layers([dict(m.named_children())[n] for m in modules], method, generators)
            for n in names
        ]
        return FusedSequential(children, names)
    if kind is nn.Dropout:
        return FusedDropout(modules, generators)  # type: ignore[arg-type]
    if kind in _PASS_THROUGH:
        return FusedPassThrough(first, len(modules))
    build = _LAYERS.get(kind)
    if build is not None and _fusable(first):
        return build(modules)
    return FusedVmap(modules)


def _fusable(layer: nn.Module) -> bool:
    """A convolution fuses with numeric zero padding; the other fused layers always."""
    if isinstance(layer, nn.Conv1d | nn.Conv2d | nn.Conv3d):
        return layer.padding_mode == "zeros" and not isinstance(layer.padding, str)
    return True


_LAYERS: dict[type[nn.Module], Callable[[Sequence[Any]], FusedModule]] = {
    nn.Linear: FusedLinear,
    nn.Conv1d: FusedConv,
    nn.Conv2d: FusedConv,
    nn.Conv3d: FusedConv,
    nn.LayerNorm: FusedLayerNorm,
    nn.Flatten: lambda modules: FusedFlatten(modules[0], len(modules)),
}


def _check_same(modules: Sequence[nn.Module]) -> None:
    first = modules[0]
    shapes = [(n, tuple(t.shape)) for n, t in first.state_dict().items()]
    for index, other in enumerate(modules[1:], start=1):
        if type(other) is not type(first):
            raise ValueError(
                f"member {index} is a {type(other).__name__}, member 0 a {type(first).__name__}"
            )
        theirs = [(n, tuple(t.shape)) for n, t in other.state_dict().items()]
        if theirs != shapes:
            raise ValueError(
                f"member {index}'s parameters differ in name or shape from member 0's: "
                "fused members share an architecture"
            )

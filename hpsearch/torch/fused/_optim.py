"""Optimizers over stacked parameters, each member with its own hyperparameters.

A fused optimizer updates the parameters of :mod:`hpsearch.torch.fused`'s fused
modules (axis 0 is the member) with the arithmetic of ``torch.optim``'s SGD,
Adam and AdamW, one operation per tensor for all members. Each member's
hyperparameters (learning rate, weight decay, momentum, betas, ...) live in a
shadow ``torch.optim`` optimizer, :meth:`FusedOptimizer.member`, so any
``torch.optim.lr_scheduler`` drives member k's schedule as it drives an unfused
trial's: the fused step reads the shadows' values each step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

Hyper = float | Sequence[float]
"""One value for every member, or one per member."""


class FusedOptimizer:
    """The shared machinery: stacked parameters, per-member hyperparameters, steps and masks."""

    hyper_names: tuple[str, ...] = ()

    def __init__(self, params: Iterable[nn.Parameter], members: int, **hyper: Any) -> None:
        self.params = [p for p in params if p.requires_grad]
        if members < 1:
            raise ValueError("a fused optimizer needs at least one member")
        for param in self.params:
            if param.dim() == 0 or param.shape[0] != members:
                shape = tuple(param.shape)
                raise ValueError(
                    f"a parameter of shape {shape} is not stacked for {members} members"
                )
        self.members = members
        self._shadows = [
            self._shadow({n: _nth(v, k, members) for n, v in hyper.items()}) for k in range(members)
        ]
        self.steps = torch.zeros(members, dtype=torch.float64)
        self._uniform_steps: int | None = 0
        """Every member's step count while they are all equal (no member was ever skipped)."""
        self.state: list[dict[str, torch.Tensor]] = [{} for _ in self.params]
        self._shadows_stepped = False
        self._raw: tuple[tuple[Any, ...], ...] = ()
        self._hyper: dict[str, _Value] = {}

    @staticmethod
    def _shadow(values: dict[str, Any]) -> torch.optim.Optimizer:
        # A real optimizer over one dummy parameter: what lr schedulers drive.
        shadow = torch.optim.SGD([nn.Parameter(torch.zeros(()))], lr=float(values.pop("lr")))
        shadow.param_groups[0].update(values)
        shadow.defaults.update(values)
        return shadow

    def member(self, member: int) -> torch.optim.Optimizer:
        """Member ``member``'s hyperparameters, as an optimizer an LR scheduler can drive."""
        return self._shadows[member]

    def _read(self) -> dict[str, _Value]:
        """Every hyperparameter of every member, re-read only when a shadow's value changed."""
        raw = tuple(
            tuple(shadow.param_groups[0][name] for name in self.hyper_names)
            for shadow in self._shadows
        )
        if raw != self._raw:
            self._raw = raw
            columns = zip(*raw, strict=True)
            self._hyper = {n: _Value.of(c) for n, c in zip(self.hyper_names, columns, strict=True)}
        return self._hyper

    def _step_counts(self) -> _Value:
        """Each member's step count (after this step's increment)."""
        if self._uniform_steps is not None:
            return _Value(float(self._uniform_steps), None)
        return _Value(None, self.steps.clone())

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every member's gradients."""
        for param in self.params:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()

    @torch.no_grad()
    def step(self, active: torch.Tensor | None = None) -> None:
        """Update every member, or only those where ``active`` (bool, ``[K]``) is true.

        A member left out (its gradients had an inf, say) keeps its parameters,
        its optimizer state and its step count.
        """
        if active is not None and bool(active.all()):
            active = None
        if active is not None and not bool(active.any()):
            return
        mask = None if active is None else active.to(torch.bool).cpu()
        if not self._shadows_stepped:
            # Once: an LR scheduler checks that its optimizer stepped before it.
            for shadow in self._shadows:
                shadow.step()
            self._shadows_stepped = True
        if mask is None:
            self.steps += 1
            if self._uniform_steps is not None:
                self._uniform_steps += 1
        else:
            self.steps += mask.to(torch.float64)
            self._uniform_steps = None
        derived = self._derive(self._read(), self._step_counts())
        skipped = None if mask is None else (~mask).nonzero().flatten()
        for index, param in enumerate(self.params):
            if param.grad is None:
                continue
            state = self.state[index]
            kept = None
            if skipped is not None and state:
                # Members left out are updated with the rest, then put back as they were.
                kept = [(t, t[skipped.to(t.device)].clone()) for t in (param, *state.values())]
            elif skipped is not None:
                kept = [(param, param[skipped.to(param.device)].clone())]
            self._update(param, param.grad, state, derived)
            for tensor, rows in kept or ():
                assert skipped is not None
                tensor[skipped.to(tensor.device)] = rows

    def _derive(self, hyper: Mapping[str, _Value], steps: _Value) -> dict[str, _Value]:
        """This step's values, from the hyperparameters and step counts: once per step."""
        raise NotImplementedError

    def _update(
        self,
        param: torch.Tensor,
        grad: torch.Tensor,
        state: dict[str, torch.Tensor],
        values: Mapping[str, _Value],
    ) -> None:
        """Update ``param`` (all members) in place from ``grad``, as torch.optim would."""
        raise NotImplementedError

    def select(self, keep: Sequence[int], params: Iterable[nn.Parameter]) -> None:
        """Keep the members at positions ``keep``, stepping ``params``: the model's after its own
        ``select`` (new parameter objects, in the same order)."""
        index = torch.as_tensor(list(keep), dtype=torch.long)
        new = [p for p in params if p.requires_grad]
        if len(new) != len(self.params) or any(
            p.shape[1:] != q.shape[1:] or p.shape[0] != len(index)
            for p, q in zip(new, self.params, strict=False)
        ):
            raise ValueError("select: pass the model's parameters after model.select(keep)")
        self.params = new
        self._shadows = [self._shadows[k] for k in keep]
        self.steps = self.steps.index_select(0, index)
        self._uniform_steps = _uniform(self.steps)
        self._raw = ()
        for state in self.state:
            for name, value in list(state.items()):
                state[name] = value.index_select(0, index.to(value.device))
        self.members = len(index)

    def member_state(self, member: int) -> dict[str, Any]:
        """Member ``member``'s optimizer state and hyperparameters: what its checkpoint keeps."""
        group = {k: v for k, v in self._shadows[member].param_groups[0].items() if k != "params"}
        return {
            "step": float(self.steps[member]),
            "state": [{n: v[member].clone() for n, v in s.items()} for s in self.state],
            "hyper": group,
        }

    def load_member_state(self, member: int, saved: Mapping[str, Any]) -> None:
        """Restore what :meth:`member_state` saved into member ``member``."""
        self.steps[member] = float(saved["step"])
        self._uniform_steps = _uniform(self.steps)
        self._shadows[member].param_groups[0].update(saved["hyper"])
        for index, (state, param) in enumerate(zip(self.state, self.params, strict=True)):
            for name, value in saved["state"][index].items():
                if name not in state:
                    state[name] = torch.zeros_like(param)
                state[name][member] = value.to(param.device)


def _nth(value: Any, member: int, members: int) -> Any:
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != members:
            raise ValueError(f"{len(value)} values for {members} members")
        return value[member]
    return value


def _uniform(steps: torch.Tensor) -> int | None:
    """The members' common step count, or ``None`` where they differ."""
    first = float(steps[0])
    return int(first) if bool((steps == first).all()) else None


class _Value:
    """One value of every member: a Python float where all members share it (the arithmetic
    is then torch.optim's own), else a float64 ``[K]`` tensor shaped to each parameter."""

    __slots__ = ("_views", "shared", "values")

    def __init__(self, shared: float | None, values: torch.Tensor | None) -> None:
        self.shared = shared
        self.values = values
        self._views: dict[tuple[torch.dtype, torch.device, int], torch.Tensor] = {}

    @classmethod
    def of(cls, column: Sequence[float]) -> _Value:
        first = float(column[0])
        if all(float(v) == first for v in column):
            return cls(first, None)
        return cls(None, torch.tensor([float(v) for v in column], dtype=torch.float64))

    @classmethod
    def derive(cls, fn: Any, *values: _Value) -> _Value:
        """``fn`` of these values, member by member (floats stay floats where all are shared)."""
        if all(v.shared is not None for v in values):
            return cls(float(fn(*(v.shared for v in values))), None)
        args = [v.values if v.values is not None else v.shared for v in values]
        return cls(None, torch.as_tensor(fn(*args), dtype=torch.float64))

    def like(self, tensor: torch.Tensor) -> float | torch.Tensor:
        """The value to broadcast over ``tensor`` (stacked: members on axis 0)."""
        if self.shared is not None:
            return self.shared
        assert self.values is not None
        key = (tensor.dtype, tensor.device, tensor.dim())
        view = self._views.get(key)
        if view is None:
            view = self.values.to(tensor.device, tensor.dtype).reshape(
                -1, *(1,) * (tensor.dim() - 1)
            )
            self._views[key] = view
        return view

    def any_nonzero(self) -> bool:
        if self.shared is not None:
            return self.shared != 0
        assert self.values is not None
        return bool((self.values != 0).any())


class FusedSGD(FusedOptimizer):
    """``torch.optim.SGD`` per member: momentum, dampening, nesterov and weight decay."""

    hyper_names = ("lr", "momentum", "dampening", "weight_decay")

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        members: int,
        *,
        lr: Hyper = 1e-3,
        momentum: Hyper = 0.0,
        dampening: Hyper = 0.0,
        weight_decay: Hyper = 0.0,
        nesterov: bool = False,
    ) -> None:
        super().__init__(
            params,
            members,
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
        )
        self.nesterov = nesterov

    def _derive(self, hyper: Mapping[str, _Value], steps: _Value) -> dict[str, _Value]:
        first = _Value.derive(lambda t: t == 1, steps)  # a member's first step
        return {
            **hyper,
            "keep": _Value.derive(lambda d: 1 - d, hyper["dampening"]),
            "first": first,
        }

    def _update(self, param, grad, state, values):  # type: ignore[no-untyped-def]
        weight_decay, momentum = values["weight_decay"], values["momentum"]
        d_p = grad.add(param * weight_decay.like(param)) if weight_decay.any_nonzero() else grad
        if momentum.any_nonzero():
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = torch.zeros_like(param)
            # A member's first step sets its buffer to its gradient, as torch does.
            first = values["first"]
            if first.shared is not None and first.shared:
                buf.copy_(d_p)
            else:
                buf.mul_(momentum.like(buf)).add_(d_p * values["keep"].like(d_p))
                if first.values is not None and bool(first.values.any()):
                    rows = first.values.nonzero().flatten().to(buf.device)
                    buf[rows] = d_p[rows]
            update = d_p.add(buf * momentum.like(buf)) if self.nesterov else buf
            if momentum.values is not None and bool((momentum.values == 0).any()):
                # A member without momentum steps on its gradient alone.
                none = (momentum.values == 0).nonzero().flatten().to(param.device)
                update = update.clone()
                update[none] = d_p[none]
            d_p = update
        param.sub_(d_p * values["lr"].like(param))


class FusedAdam(FusedOptimizer):
    """``torch.optim.Adam`` per member (L2 weight decay added to the gradient)."""

    hyper_names = ("lr", "beta1", "beta2", "eps", "weight_decay")
    decoupled = False

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        members: int,
        *,
        lr: Hyper = 1e-3,
        betas: tuple[float, float] | Sequence[tuple[float, float]] = (0.9, 0.999),
        eps: Hyper = 1e-8,
        weight_decay: Hyper = 0.0,
    ) -> None:
        pairs = [betas] * members if isinstance(betas[0], float | int) else list(betas)
        super().__init__(
            params,
            members,
            lr=lr,
            beta1=[float(b[0]) for b in pairs],  # type: ignore[index]
            beta2=[float(b[1]) for b in pairs],  # type: ignore[index]
            eps=eps,
            weight_decay=weight_decay,
        )

    def _derive(self, hyper: Mapping[str, _Value], steps: _Value) -> dict[str, _Value]:
        lr, beta1, beta2 = hyper["lr"], hyper["beta1"], hyper["beta2"]
        # Bias corrections from each member's own step count, in float64 as torch's floats.
        correction1 = _Value.derive(lambda b, t: 1 - b**t, beta1, steps)
        return {
            **hyper,
            "decay": _Value.derive(lambda a, w: 1 - a * w, lr, hyper["weight_decay"]),
            "one_minus_beta1": _Value.derive(lambda b: 1 - b, beta1),
            "one_minus_beta2": _Value.derive(lambda b: 1 - b, beta2),
            "step_size": _Value.derive(lambda a, c: a / c, lr, correction1),
            "correction2_sqrt": _Value.derive(lambda b, t: (1 - b**t) ** 0.5, beta2, steps),
        }

    def _update(self, param, grad, state, values):  # type: ignore[no-untyped-def]
        exp_avg = state.get("exp_avg")
        if exp_avg is None:
            exp_avg = state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = torch.zeros_like(param)
        exp_avg_sq = state["exp_avg_sq"]
        if values["weight_decay"].any_nonzero():
            if self.decoupled:
                param.mul_(values["decay"].like(param))
            else:
                grad = grad.add(param * values["weight_decay"].like(param))
        exp_avg.lerp_(grad, values["one_minus_beta1"].like(exp_avg))
        beta2, one_minus = values["beta2"], values["one_minus_beta2"]
        if beta2.shared is not None and one_minus.shared is not None:
            exp_avg_sq.mul_(beta2.shared).addcmul_(grad, grad, value=one_minus.shared)
        else:
            exp_avg_sq.mul_(beta2.like(grad)).add_(grad * grad * one_minus.like(grad))
        denom = (exp_avg_sq.sqrt() / values["correction2_sqrt"].like(exp_avg_sq)).add_(
            values["eps"].like(exp_avg_sq)
        )
        size = values["step_size"].like(param)
        if isinstance(size, float):
            param.addcdiv_(exp_avg, denom, value=-size)
        else:
            param.sub_(exp_avg.div(denom).mul_(size))


class FusedAdamW(FusedAdam):
    """``torch.optim.AdamW`` per member (decoupled weight decay)."""

    decoupled = True

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        members: int,
        *,
        lr: Hyper = 1e-3,
        betas: tuple[float, float] | Sequence[tuple[float, float]] = (0.9, 0.999),
        eps: Hyper = 1e-8,
        weight_decay: Hyper = 1e-2,
    ) -> None:
        super().__init__(params, members, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


class FusedGradScaler:
    """``torch.amp.GradScaler`` per member: each member's own scale, skip and growth.

    An inf or NaN in member k's gradients skips member k's step and halves its
    scale; the others step as if it were not there.
    """

    def __init__(
        self,
        members: int,
        *,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.scales = torch.full((members,), init_scale if enabled else 1.0, dtype=torch.float64)
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self.growth_tracker = torch.zeros(members, dtype=torch.long)
        self.found_inf = torch.zeros(members, dtype=torch.bool)

    def scale(self, losses: torch.Tensor) -> torch.Tensor:
        """The members' losses (``[K]``), each times its scale, summed: what to call backward on."""
        if not self.enabled:
            return losses.sum()
        return (losses * self.scales.to(losses.device, losses.dtype)).sum()

    def unscale_(self, optimizer: FusedOptimizer) -> torch.Tensor:
        """Divide each member's gradients by its scale; which members' gradients are not finite."""
        found = torch.zeros(optimizer.members, dtype=torch.bool)
        inverse = (1.0 / self.scales) if self.enabled else None
        for param in optimizer.params:
            if param.grad is None:
                continue
            if inverse is not None:
                param.grad.mul_(
                    inverse.to(param.device, param.grad.dtype).reshape(
                        -1, *(1,) * (param.dim() - 1)
                    )
                )
            found |= (~torch.isfinite(param.grad)).reshape(param.shape[0], -1).any(dim=1).cpu()
        self.found_inf = found
        return found

    def step(self, optimizer: FusedOptimizer, active: torch.Tensor | None = None) -> torch.Tensor:
        """Unscale, step the members whose gradients are finite, update the scales; the skipped."""
        found = self.unscale_(optimizer)
        stepping = ~found if active is None else (~found & active.cpu())
        optimizer.step(stepping)
        self.update(found)
        return found

    def update(self, found: torch.Tensor) -> None:
        """Back off the scale of members that overflowed; grow the others' every interval."""
        if not self.enabled:
            return
        self.scales = torch.where(found, self.scales * self.backoff_factor, self.scales)
        tracker = torch.where(found, torch.zeros_like(self.growth_tracker), self.growth_tracker + 1)
        grow = tracker >= self.growth_interval
        self.scales = torch.where(grow, self.scales * self.growth_factor, self.scales)
        self.growth_tracker = torch.where(grow, torch.zeros_like(tracker), tracker)

    def select(self, keep: Sequence[int]) -> None:
        """Keep the members at positions ``keep``."""
        index = torch.as_tensor(list(keep), dtype=torch.long)
        self.scales = self.scales.index_select(0, index)
        self.growth_tracker = self.growth_tracker.index_select(0, index)
        self.found_inf = self.found_inf.index_select(0, index)

    def member_state(self, member: int) -> dict[str, float]:
        """Member ``member``'s scale and growth tracker."""
        return {
            "scale": float(self.scales[member]),
            "growth_tracker": int(self.growth_tracker[member]),
        }

    def load_member_state(self, member: int, saved: Mapping[str, float]) -> None:
        """Restore what :meth:`member_state` saved."""
        self.scales[member] = float(saved["scale"])
        self.growth_tracker[member] = int(saved["growth_tracker"])

"""The simulated GPUs of a search, as ``telemetry.simulated`` describes them: pure data.

The config composes these sections; the simulation reads them
(:class:`~hpsearch.simulation.SharingModel` holds a :class:`SharingSpec`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from hpsearch._settings import Settings
from hpsearch.simulation._traces import BUILTIN_TRACES


class SharingSpec(Settings):
    """How trials that share a simulated GPU slow each other: the sharing model's constants.

    The defaults are an NVIDIA H200's, measured by ``scripts/bench_sharing.py --real``
    (``benchmarks/results/sharing-2026-11-26-nvidia-h200.json``, the file of
    ``shared/gpu-evidence/2026-11-26-h200``); ``make gpu-calibrate`` writes them for
    another GPU.

    Attributes:
        switch_cost: the share of its speed a time-sliced trial loses to switching
            when its GPU is contended (paid in proportion to how busy the others keep
            it): 0.106, one less the 0.894 that 2, 4 and 8 GPU-filling processes kept.
        mps: the GPU runs an MPS daemon (kernels of different trials overlap).
        mps_switch_cost: the same under MPS: 0, filling processes kept 1.035.
        mps_max_speedup: the most MPS gains over time-slicing, in aggregate: 5.06,
            what 8 small-kernel processes gained.
        fused_member_cost: what each member more adds to a fused group's step, as a
            share of one member's step: the host's per-member work (its batches, the
            optimizer's per-member values) and the kernels' per-member floor.
    """

    switch_cost: float = Field(default=0.106, ge=0, lt=1)
    mps: bool = False
    mps_switch_cost: float = Field(default=0.0, ge=0, lt=1)
    mps_max_speedup: float = Field(default=5.06, ge=1)
    fused_member_cost: float = Field(default=0.05, ge=0, lt=1)


class SimulatedSpec(Settings):
    """Simulated GPUs, for machines with none (``telemetry.backend: simulated``).

    Attributes:
        source: ``load``: the running trials declare their load
            (``ctx.simulate_gpu_load``), the GPUs show the sum; ``constant``: the
            readings below, always; ``trace``: replay a CSV trace row by row.
        trace: for ``source: trace``, a built-in trace (``rtx4050-seed004``,
            ``rtx4060-seed000``, ``rtx3090-seed001``) or a CSV file as written by
            ``hpsearch monitor --csv``.
        gpus: how many GPUs (``load`` and ``constant``; a trace has its own).
        name, memory_total_mb, power_limit_w: each GPU's make (default: the seeds'
            RTX 4050 Laptop GPU, 6 GB).
        idle_power_w: power at 0% utilisation (``load``).
        utilization_pct, memory_used_mb, power_w: the readings of ``constant``.
        sharing: how trials sharing a GPU slow each other (``load``, and the
            simulated-time runner).
    """

    source: Literal["load", "constant", "trace"] = "load"
    trace: str | None = None
    gpus: PositiveInt = 1
    name: str = "Simulated RTX 4050 Laptop GPU"
    memory_total_mb: PositiveFloat = 6141.0
    power_limit_w: PositiveFloat = 115.0
    idle_power_w: float = Field(default=5.0, ge=0)
    utilization_pct: float = 0.0
    memory_used_mb: float = 0.0
    power_w: float | None = None
    sharing: SharingSpec = Field(default_factory=SharingSpec)

    @model_validator(mode="after")
    def _trace_when_replaying(self) -> SimulatedSpec:
        if self.source == "trace" and not self.trace:
            raise ValueError(
                "source: trace needs a trace: a built-in name (rtx4050-seed004, "
                "rtx4060-seed000, rtx3090-seed001) or a CSV file written by hpsearch monitor --csv"
            )
        if self.source != "trace" and self.trace:
            raise ValueError(f"trace is only read with source: trace (source is {self.source})")
        return self


def parse_simulate(text: str) -> SimulatedSpec:
    """Read a ``--simulate`` argument into a :class:`SimulatedSpec`.

    Accepted: a built-in trace name or a CSV file (replayed); ``constant`` or
    ``load``, optionally followed by ``:key=value,...`` with any field of
    :class:`SimulatedSpec` (e.g. ``load:gpus=2`` or
    ``constant:utilization_pct=95,memory_used_mb=3500``).

    Raises:
        ValueError: with the accepted forms.
    """
    text = text.strip()
    kind, _, rest = text.partition(":")
    if kind in ("constant", "load"):
        fields: dict[str, Any] = {"source": kind}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"'{item}' is not key=value")
            fields[key.strip()] = value.strip()
        try:
            return SimulatedSpec.model_validate(fields, strict=False)
        except ValueError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or kind}: {e['msg']}"
                for e in getattr(exc, "errors", lambda: [])()
            )
            raise ValueError(problems or str(exc)) from None
    if text in BUILTIN_TRACES or text.endswith(".csv"):
        return SimulatedSpec(source="trace", trace=text)
    raise ValueError(
        f"'{text}' is not a built-in trace ({', '.join(BUILTIN_TRACES)}), a .csv trace, "
        "'constant[:key=value,...]' or 'load[:key=value,...]'"
    )

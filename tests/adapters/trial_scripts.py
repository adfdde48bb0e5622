"""Running another tool's trial script as hpsearch's command trial runs it."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from hpsearch import TrialContext
from hpsearch.adapters import run_command
from hpsearch.trial.script import CommandSpec


def run_script(
    folder: Path, source: str, params: dict[str, Any], ctx: TrialContext, **spec: Any
) -> Any:
    """Write ``source`` as ``train.py`` in ``folder`` and run it as ``ctx``'s trial, its
    folder ``trials/my-study/trial-7`` (study ``my-study``); return its final metrics."""
    script = folder / "train.py"
    script.write_text(textwrap.dedent(source))
    return run_command(
        CommandSpec(command=["python", str(script)], **spec),
        params,
        ctx,
        workdir=str(folder),
        trial_dir=str(folder / "trials" / "my-study" / "trial-7"),
    )

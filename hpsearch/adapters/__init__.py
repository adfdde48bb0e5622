"""The user's code as hpsearch calls it, whatever form it was written in.

One module per form of ``train:``: ``_function`` (``package.module:function``,
called as ``train(params, ctx)``: found, imported and checked once), ``_members``
(fused trials: ``train_members(members)``, ``hpsearch.fused``), ``_command`` (a
training script run as it is, its printed lines as reports), ``_optuna`` (an
Optuna objective, run unchanged on a trial of the driver's study), ``_tune`` (a
Ray Tune function trainable, run unchanged), ``tune_space`` (a Ray Tune
``param_space`` as the config's space), ``forms`` (which form a function was
written for, read without running it, so a wrong ``train:`` is one line naming
the right one) and ``by_value`` (a function a dict config holds itself: named, or
sent by value where no worker could import it). The last three are public
modules: the config reads them, as it reads other packages' ``settings``.

Imported on first use (hpsearch._lazy): the config reads ``forms`` and a worker
one adapter, without the others' libraries.
"""

from typing import TYPE_CHECKING

from hpsearch._lazy import lazy_exports

if TYPE_CHECKING:
    from hpsearch.adapters._command import (
        CommandFailed,
        command_line,
        command_train,
        parse_line,
        run_command,
    )
    from hpsearch.adapters._function import (
        check_fusion,
        check_train,
        resolve_train_function,
        user_function,
    )
    from hpsearch.adapters._members import SHARED_ATTRIBUTE, Member, fused, shared_of
    from hpsearch.adapters._optuna import objective_train, pickled_sampler
    from hpsearch.adapters._tune import asked_resources, nested, tune_train
    from hpsearch.adapters._tune_mlflow import answer_setup_mlflow
    from hpsearch.adapters.by_value import install_pickles, named_function, pickles_of
    from hpsearch.adapters.forms import REPORTS, Form, form_in_source, form_of, wrong_form
    from hpsearch.adapters.tune_space import (
        TuneSpaceError,
        TuneSpaceWarning,
        converted,
        space_from_tune,
    )

__getattr__, __dir__ = lazy_exports(__name__)

__all__ = [
    "REPORTS",
    "SHARED_ATTRIBUTE",
    "CommandFailed",
    "Form",
    "Member",
    "TuneSpaceError",
    "TuneSpaceWarning",
    "answer_setup_mlflow",
    "asked_resources",
    "check_fusion",
    "check_train",
    "command_line",
    "command_train",
    "converted",
    "form_in_source",
    "form_of",
    "fused",
    "install_pickles",
    "named_function",
    "nested",
    "objective_train",
    "parse_line",
    "pickled_sampler",
    "pickles_of",
    "resolve_train_function",
    "run_command",
    "shared_of",
    "space_from_tune",
    "tune_train",
    "user_function",
    "wrong_form",
]

"""What the documentation names in the code exists: a module that moves or goes fails here."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import hpsearch

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

_FILE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.py)\b")
_TREE_PACKAGE = re.compile(r"^  (\w+)/\s")
_PRIVATE = re.compile(r"\b(_[a-z]\w*)\b")


_OURS = [
    path.relative_to(REPO).as_posix()
    for folder in ("hpsearch", "scripts", "tests", "examples", "docs")
    for path in (REPO / folder).rglob("*.py")
]
USER_CODE = ("mypkg/", "src/mypkg/", "hb_space.py", "code.py", "cmd.py")
"""The user's package (in a src layout too) and modules the pages' examples invent."""
OPTUNA_EXAMPLES = frozenset(
    {
        "basic/quadratic.py",
        "basic/quadratic_multi_objective.py",
        "basic/quadratic_constraint.py",
        "basic/pruning.py",
        "faq/enqueue_trial.py",
        "faq/max_trials_callback.py",
        "multi_objective/pytorch_simple.py",
        "pytorch/pytorch_simple.py",
        "pytorch/pytorch_lightning_simple.py",
        "sklearn/sklearn_simple.py",
        "sklearn/sklearn_additional_args.py",
        "sklearn/sklearn_optuna_search_cv_simple.py",
        "lightgbm/lightgbm_simple.py",
        "xgboost/xgboost_simple.py",
    }
)
"""Files of github.com/optuna/optuna-examples that a page may name, as its README links them
on 2026-11-26 (``simple_pruning.py`` is ``basic/pruning.py`` there now): the one place to
update when the examples move (no network in the tests)."""
OTHER_REPOSITORIES = {"optuna-examples/": OPTUNA_EXAMPLES}
"""Other projects' repositories whose files a page names (their examples, run by hand)."""


def _exists(named: str) -> bool:
    """A ``.py`` path as the pages write it: the end of a path of the repository's, or
    a file of an installed package (``ray/tune/examples/...``)."""
    if named.startswith(USER_CODE):
        return True
    for repository, files in OTHER_REPOSITORIES.items():
        if named.startswith(repository):
            return named.removeprefix(repository) in files
    top = named.split("/", 1)[0]
    spec = importlib.util.find_spec(top) if "/" in named else None
    if spec is not None and spec.origin is not None:
        return (Path(spec.origin).parent.parent / named).is_file()
    return any(ours == named or ours.endswith(f"/{named}") for ours in _OURS)


def test_every_python_file_a_page_names_exists() -> None:
    missing = [
        f"{page.relative_to(REPO)}: {named}"
        for page in PAGES
        for named in _FILE.findall(page.read_text(encoding="utf-8"))
        if not _exists(named)
    ]
    assert missing == []


def test_every_module_the_package_tree_lists_exists() -> None:
    # The tree of the package ("hpsearch/" then "  package/   what it holds: _a, _b, ..."):
    # each private module it names under a package is a file of that package.
    listed: list[tuple[str, str]] = []
    for page in PAGES:
        package = None
        for line in page.read_text(encoding="utf-8").splitlines():
            found = _TREE_PACKAGE.match(line)
            if found and (REPO / "hpsearch" / found.group(1)).is_dir():
                package = found.group(1)
            elif not line.startswith("    ") or not line.strip():
                package = None
            if package is not None:
                listed += [(package, name) for name in _PRIVATE.findall(line)]
    assert len(listed) > 20  # the tree was found
    missing = [
        f"{p}/{m}.py" for p, m in listed if not (REPO / "hpsearch" / p / f"{m}.py").is_file()
    ]
    assert missing == []


_DOTTED = re.compile(r"\bhpsearch(?:\.\w+)+")


def _python_name(dotted: str) -> bool:
    """Whether ``hpsearch.x...`` names Python (a module, or the package's public API), not a
    tag or attribute hpsearch records under its name (``hpsearch.prune_reason``)."""
    second = dotted.split(".")[1]
    package = REPO / "hpsearch"
    known = (package / second).is_dir() or (package / f"{second}.py").is_file()
    return known or second in hpsearch.__all__


def _resolves(dotted: str) -> bool:
    """A module, then attributes: as ``import`` and ``getattr`` find them."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_hpsearch_name_a_page_writes_resolves() -> None:
    written = {
        (page.relative_to(REPO).as_posix(), dotted)
        for page in PAGES
        for dotted in _DOTTED.findall(page.read_text(encoding="utf-8"))
        if _python_name(dotted)
    }
    assert len(written) > 10
    assert sorted(f"{page}: {name}" for page, name in written if not _resolves(name)) == []


def test_an_optuna_example_a_page_names_is_where_the_examples_keep_it_today() -> None:
    assert _exists("optuna-examples/basic/pruning.py")
    assert not _exists("optuna-examples/basic_and_faq_usages/simple_pruning.py")  # moved
    assert not _exists("optuna-examples/simple_pruning.py")

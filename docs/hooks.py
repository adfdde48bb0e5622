"""MkDocs hooks: the pages generated from the code and the benchmark results, at build time.

A page holds a marker; the hook writes the content in its place, so a key added
to the config, a flag added to the CLI or a benchmark re-run appears without
anyone editing a page:

* ``<!-- generated: config -->``: every key of the config, from its pydantic models;
* ``<!-- generated: cli -->``: every command and flag, from the click parser;
* ``<!-- generated: benchmarks -->``: each ``benchmarks/results/*.json``, its targets;
* ``<!-- generated: plots -->``: figures drawn from result files (inline SVG);
* ``{{ FILE PATH }}``, inline: one figure of ``benchmarks/results/FILE``, where
  ``PATH`` walks the JSON by ``/`` (``results/auto/wall_s``, ``medians/0/...``).
  ``{{ FILE PATH ÷ PATH }}`` is the ratio of two figures of the file, ``{{ FILE
  targets }}`` how many of its ``target*`` verdicts hold (``38 of 38``), and a last
  word ``x``, ``s``, ``ms``, ``%`` or a format (``.2f``) says how it is written;
  ``{{ FILE PATH <= 30 }}`` (or ``>=``) is the verdict, ``met`` or ``**missed**``,
  as ``{{ FILE PATH verdict }}`` is of a target the file holds (a boolean).
  A file or key that is not there fails the build: no figure is copied by hand.
"""

from __future__ import annotations

import json
import re
import types
import typing
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_MARKER = re.compile(r"<!-- generated: (\w+) -->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each marker of the page with what it names, and each figure with its value."""
    markdown = _MARKER.sub(lambda m: _GENERATORS[m.group(1)](), markdown)
    return _FIGURE.sub(lambda m: figure(m.group(1)), markdown)


_CDN_SHIM = re.compile(r'\s*<script src="https://unpkg\.com/iframe-worker/shim"></script>')


def on_post_page(output: str, **_: Any) -> str:
    """No script from a CDN: the offline plugin's search shim for file:// pages is one (so
    search works where the site is served, ``make docs``, and not from files)."""
    return _CDN_SHIM.sub("", output)


# -- the config ------------------------------------------------------------------------


def config_reference() -> str:
    """Every section of the config, once, and each of its keys: what it is, in words, its
    default, and what it means (from the models' docstrings, roles and markup removed)."""
    return "\n".join(_config_sections()[0])


def undocumented_keys() -> list[str]:
    """The config's keys whose model's docstring says nothing of them (the reference test)."""
    return _config_sections()[1]


def _config_sections() -> tuple[list[str], list[str]]:
    from pydantic import BaseModel

    from hpsearch.config import RunConfig
    from hpsearch.config._load import _unwrap  # Annotated and `| None` stripped, as errors do

    by_path: dict[str, list[type[BaseModel]]] = {}
    first_path: dict[type[BaseModel], str] = {}
    meaning_of_path: dict[str, str] = {}

    def visit(model: type[BaseModel], path: str) -> None:
        if model in first_path:  # one section per model: `objectives` are `objective`s
            return
        first_path[model] = path
        by_path.setdefault(path, []).append(model)
        meanings = _attributes(model.__doc__ or "")
        for name, field in model.model_fields.items():
            inner = f"{path}.{name}".lstrip(".")
            if typing.get_origin(_unwrap(field.annotation)) is dict:
                inner += ".<name>"  # a mapping's entries: space.<name>
            if name in meanings:
                meaning_of_path.setdefault(inner, meanings[name])
            for nested in _models(field.annotation):
                visit(nested, inner)

    visit(RunConfig, "")
    out: list[str] = []
    missing: list[str] = []
    for path, models in by_path.items():
        out.append(f"## `{path}`\n" if path else "## The top level\n")
        if path in meaning_of_path:
            out.append(_sentence(meaning_of_path[path]) + "\n")
        for model in models:
            if len(models) > 1:
                out.append(f"### {_summary(model)}\n")
            elif not path:
                out.append(_summary(model) + "\n")
            meanings = _attributes(model.__doc__ or "")
            for name, field in model.model_fields.items():
                meaning = meanings.get(name, "")
                if not meaning:
                    missing.append(f"{path}.{name}".lstrip("."))
                inner = _models(field.annotation)
                where = first_path.get(inner[0], "") if len(inner) == 1 else ""
                out.append(_entry(name, field, where, meaning))
            out.append("")
    return out, missing


def _summary(model: Any) -> str:
    """The first paragraph of a model's docstring, as one line of text."""
    return _plain((model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " "))


def _entry(name: str, field: Any, section: str, meaning: str) -> str:
    """One key: its name, what it takes in words, its default, what it means."""
    default = "required" if field.is_required() else f"default {_default(field)}"
    kind = _words(field.annotation, field.metadata, section)
    return f"- **`{name}`**: {kind}; {default}. {_sentence(meaning)}".rstrip()


def _sentence(text: str) -> str:
    """Docstring text as a Markdown sentence: a capital first letter, a full stop."""
    text = _plain(text)
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", ")", "`")) and text[-2:] != ".)" else text + "."


_ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|obj|exc):`~?([^`]+)`")


def _plain(text: str) -> str:
    """Docstring text as Markdown: Sphinx roles and double backticks become code spans."""
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", " ".join(text.split()))


def _attributes(doc: str) -> dict[str, str]:
    """A Google-style docstring's ``Attributes:`` entries, by name."""
    found: dict[str, str] = {}
    block = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    current = ""
    last: list[str] = []
    for line in block.splitlines():
        entry = re.match(r"^\s{4,8}([\w, ]+):\s*(.*)$", line)
        if entry and not line.startswith(" " * 12):
            names = [n.strip() for n in entry.group(1).split(",")]
            current = entry.group(2)
            for name in names:
                found[name] = current
            last = names
        elif line.strip() and current:
            for name in last:
                found[name] = found[name] + " " + line.strip()
        elif not line.strip() and found:
            current = ""
    return found


def _models(annotation: Any) -> list[Any]:
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


_BOUNDS = (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"))


def _words(annotation: Any, metadata: list[Any], path: str) -> str:  # noqa: PLR0911
    """What a key takes, in words ("integer ≥ 1, or none", "seconds, e.g. `90s` or `2m`")."""
    from pydantic import BaseModel

    from hpsearch._settings import Seconds

    origin = typing.get_origin(annotation)
    # The validator that reads "90s", "2m": what makes a number of seconds a duration.
    duration = next(m for m in typing.get_args(Seconds) if hasattr(m, "func"))
    if annotation is Seconds or any(m is duration for m in metadata):
        bounds = [b for b in _bounds(metadata) if b != "> 0"]
        return "seconds, e.g. `90`, `90s`, `2m` or `1h`" + (f" ({bounds[0]})" if bounds else "")
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _words(inner, [*extra, *metadata], path)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = type(None) in typing.get_args(annotation)
        if len(_models(annotation)) > 1:
            text = "one of the forms below"
        elif len(members) > 3:  # null, booleans, numbers, strings: a YAML scalar
            text, optional = "a plain value (null, true or false, a number or text)", False
        else:
            text = " or ".join(dict.fromkeys(_words(m, metadata, path) for m in members))
        return f"{text}, or none" if optional and not text.endswith("or none") else text
    if origin is typing.Literal:
        values = [f"`{v}`" for v in typing.get_args(annotation)]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return f"a list of {_plural(_words(item, [], path))}"
    if origin is dict:
        value = typing.get_args(annotation)[1]
        if value is Any:
            return "a mapping of names to values"
        return f"a mapping of names to {_plural(_words(value, [], path))}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"a section (`{path}`, below)" if path else "a section"
    base = {bool: "true or false", int: "an integer", float: "a number", str: "text"}.get(
        annotation, "any value"
    )
    bounds = _bounds(metadata)
    pattern = next((m.pattern for m in metadata if getattr(m, "pattern", None)), None)
    if pattern is not None:
        return "text of the form `package.module:function`"
    return f"{base} {' and '.join(bounds)}" if bounds else base


def _bounds(metadata: list[Any]) -> list[str]:
    """The limits ``metadata`` sets (``≥ 3``), the tightest lower one first."""
    found = [
        (key, getattr(m, key))
        for m in metadata
        for key, _ in _BOUNDS
        if getattr(m, key, None) is not None
    ]
    lower = sorted((v, k) for k, v in found if k in ("gt", "ge"))
    upper = sorted((v, k) for k, v in found if k in ("lt", "le"))
    signs = dict(_BOUNDS)
    kept = ([lower[-1]] if lower else []) + ([upper[0]] if upper else [])
    return [f"{signs[key]} {value:g}" for value, key in kept]


def _plural(words: str) -> str:
    if words.startswith("a plain value"):
        return "plain values" + words.removeprefix("a plain value")
    if words.startswith("a section ("):  # a list of sections: each as that section says
        return "sections like " + words.removeprefix("a section (").replace(", below)", " (below)")
    for single, many in (("an integer", "integers"), ("a number", "numbers"), ("text", "texts")):
        if words.startswith(single):
            return many + words[len(single) :]
    return words.removeprefix("a ").removeprefix("an ")


def _default(field: Any) -> str:
    from pydantic import BaseModel

    if field.default_factory is not None:
        value = field.default_factory()
        return "its own defaults" if isinstance(value, BaseModel) else _yaml(value)
    return _yaml(field.default)


def _yaml(value: Any) -> str:
    """A value as the config file writes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`' if not value or value.strip() != value else f"`{value}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- the command line -----------------------------------------------------------------


def cli_reference() -> str:
    """Every command of ``hpsearch``: what it does, its arguments and its flags."""
    import click

    from hpsearch.cli import main

    out: list[str] = []
    context = click.Context(main, info_name="hpsearch")
    for name in sorted(main.list_commands(context)):
        command = main.get_command(context, name)
        if command is None:
            continue
        sub = click.Context(command, info_name=name, parent=context)
        out.append(f"## `hpsearch {name}`\n")
        out.append(f"```\n{command.get_usage(sub)}\n```\n")
        out.append((command.help or "").strip() + "\n")
        rows = []
        for parameter in command.params:
            if isinstance(parameter, click.Option):
                flags = ", ".join(f"`{o}`" for o in [*parameter.opts, *parameter.secondary_opts])
                default = parameter.default
                shown = "" if default in (None, False, ()) or callable(default) else f"`{default}`"
                rows.append(f"| {flags} | {_cell(parameter.help or '')} | {shown} |")
            elif isinstance(parameter, click.Argument):
                rows.append(f"| `{parameter.human_readable_name}` | argument | |")
        if rows:
            out.append("| flag | what it does | default |\n|---|---|---|")
            out.extend(rows)
            out.append("")
    return "\n".join(out)


# -- the benchmarks --------------------------------------------------------------------


def benchmark_tables() -> str:
    """Each result file: when, where, and every target with its verdict, as the file says."""
    out: list[str] = [
        "| file | date | device | targets met | missed |",
        "|---|---|---|---|---|",
    ]
    details: list[str] = []
    for path in sorted((REPO / "benchmarks" / "results").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        met = f"{data['targets_passed']} of {data['targets']}" if "targets" in data else "-"
        missed = "<br>".join(_cell(m) for m in data.get("missed", [])) or "-"
        device = _cell(str(data.get("device", "-")))[:80]
        out.append(f"| `{path.name}` | {data.get('date', '-')} | {device} | {met} | {missed} |")
        if data.get("results"):
            details.append(_result_table(path.name, data["results"]))
    return "\n".join(out) + "\n\n" + "\n".join(details)


_FIGURE = re.compile(r"\{\{ (.+?) \}\}")
_UNITS = {"x": "{:.2f}x", "s": "{:.1f} s", "ms": "{:.1f} ms", "%": "{:.1f}%"}


def figure(expression: str, results: Path | None = None) -> str:
    """One figure of a result file, as a page writes it (see the module's docstring).

    Raises:
        ValueError: the file, a key or the expression's form is not there.
    """
    folder = results or REPO / "benchmarks" / "results"
    name, *words = expression.split()
    path = folder / name
    if not path.is_file():
        raise ValueError(f"{{{{ {expression} }}}}: no file benchmarks/results/{name}")
    data = json.loads(path.read_text(encoding="utf-8"))
    if words == ["targets"]:
        verdicts = _verdicts(data)
        return f"{sum(verdicts)} of {len(verdicts)}"
    if not words:
        raise ValueError(f"{{{{ {expression} }}}}: write FILE PATH [÷ PATH] [FORMAT]")
    value = _walk(data, words.pop(0), expression)
    if words[:1] == ["÷"] and len(words) >= 2:
        value = float(value) / float(_walk(data, words[1], expression))
        words = words[2:]
    if len(words) == 2 and words[0] in {"<=", ">="}:
        bound = float(words[1])
        met = float(value) <= bound if words[0] == "<=" else float(value) >= bound
        return "met" if met else "**missed**"
    if len(words) > 1:
        raise ValueError(f"{{{{ {expression} }}}}: write FILE PATH [÷ PATH] [FORMAT]")
    if not words:
        return str(value)
    if words[0] == "verdict":  # a boolean target of the file
        return "met" if value is True else "**missed**"
    return _UNITS.get(words[0], "{:" + words[0] + "}").format(value)


def _walk(data: Any, path: str, expression: str) -> Any:
    """The value at ``path`` (keys and list indices joined by ``/``)."""
    for key in path.split("/"):
        try:
            data = data[int(key)] if isinstance(data, list) else data[key]
        except (KeyError, IndexError, ValueError):
            raise ValueError(f"{{{{ {expression} }}}}: no {key!r} on the way to {path}") from None
    return data


def _verdicts(data: Any) -> list[bool]:
    """Every ``target*`` verdict (a boolean) in a result, however deep."""
    found: list[bool] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, bool) and key.startswith("target"):
                found.append(value)
            else:
                found.extend(_verdicts(value))
    elif isinstance(data, list):
        for value in data:
            found.extend(_verdicts(value))
    return found


def _result_table(name: str, results: dict[str, Any] | list[Any]) -> str:
    """One file's results: a row per case, its scalar figures as columns."""
    cases = results.items() if isinstance(results, dict) else enumerate(results)
    rows = {str(k): v for k, v in cases if isinstance(v, dict)}
    columns: list[str] = []
    for figures in rows.values():
        for key, value in figures.items():
            scalar = isinstance(value, int | float | str | bool) and key not in columns
            if scalar and len(columns) < 8:
                columns.append(key)
    if not rows or not columns:
        return ""
    lines = [f"### `{name}`\n", "| case | " + " | ".join(columns) + " |"]
    lines.append("|---" * (len(columns) + 1) + "|")
    for case, figures in rows.items():
        cells = [_cell(str(figures.get(c, ""))) for c in columns]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plots() -> str:
    """Figures drawn from the result files at build time: the figure is the file's."""
    parts = [
        _plotted("fusion", "Fused members against separate processes", _draw_fusion),
        _plotted("packing-fusion", "Fusion auto against the oracle in the lab", _draw_lab),
    ]
    return "\n\n".join(p for p in parts if p)


def _plotted(prefix: str, title: str, draw: Any) -> str:
    """The newest ``<prefix>-<date>*.json`` drawn by ``draw(axes, data)``, as an inline SVG."""
    found = sorted((REPO / "benchmarks" / "results").glob(f"{prefix}-2*.json"))
    if not found:
        return ""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.2))
    draw(axes, json.loads(found[-1].read_text(encoding="utf-8")))
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]  # inline: no file, no XML prolog in the page
    return f"### {title} (`{found[-1].name}`)\n\n{svg}\n"


def _draw_fusion(axes: Any, data: dict[str, Any]) -> None:
    """Fused members' aggregate throughput over separate processes, per shape and count."""
    for shape, result in data["results"].items():
        fused = result.get("fused", {})
        counts = sorted(int(k) for k in fused)
        axes.plot(counts, [fused[str(k)]["over_separate"] for k in counts], marker="o", label=shape)
    axes.axhline(1.0, color="grey", linewidth=0.8)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("members fused")
    axes.set_ylabel("÷ separate processes")
    axes.legend(title="width x depth x batch", fontsize=7)


def _draw_lab(axes: Any, data: dict[str, Any]) -> None:
    """The fusion lab: auto's time to budget over the oracle's, per workload."""
    cases = {k: v for k, v in data["results"].items() if "auto_over_oracle" in v}
    axes.barh(list(cases), [v["auto_over_oracle"] for v in cases.values()])
    axes.axvline(1.10, color="red", linewidth=0.8, label="target: within 10%")
    axes.set_xlabel("auto ÷ oracle (time to budget)")
    axes.legend(fontsize=7)


_GENERATORS = {
    "config": config_reference,
    "cli": cli_reference,
    "benchmarks": benchmark_tables,
    "plots": plots,
}


def on_post_template(output_content: str, **_: Any) -> str:
    """The same for the pages built from a template alone (404.html)."""
    return _CDN_SHIM.sub("", output_content)

"""MkDocs hooks: the pages generated from the code and the benchmark results, at build time.

A page holds a marker; the hook writes the content in its place, so a key added
to the config, a flag added to the CLI or a benchmark re-run appears without
anyone editing a page:

* ``<!-- generated: config -->``: every key of the config, from its pydantic models;
* ``<!-- generated: cli -->``: every command and flag, from the click parser;
* ``<!-- generated: benchmarks -->``: each ``benchmarks/results/*.json``, its targets;
* ``<!-- generated: plots -->``: figures drawn from result files (inline SVG).
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
    """Replace each marker of the page with what it names."""
    return _MARKER.sub(lambda m: _GENERATORS[m.group(1)](), markdown)


_CDN_SHIM = re.compile(r'\s*<script src="https://unpkg\.com/iframe-worker/shim"></script>')


def on_post_page(output: str, **_: Any) -> str:
    """No script from a CDN: the offline plugin's search shim for file:// pages is one (so
    search works where the site is served, ``make docs``, and not from files)."""
    return _CDN_SHIM.sub("", output)


# -- the config ------------------------------------------------------------------------


def config_reference() -> str:
    """Every section and key of the config: type, default, allowed values, example, meaning."""
    from pydantic import BaseModel

    from hpsearch.config import RunConfig

    out: list[str] = []
    seen: set[type[BaseModel]] = set()

    def section(model: type[BaseModel], path: str) -> None:
        if model in seen:
            return
        seen.add(model)
        meanings = _attributes(model.__doc__ or "")
        summary = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        out.append(f"## `{path or 'top level'}`\n\n{summary}\n")
        out.append("| key | type | default | allowed | example | what it is |")
        out.append("|---|---|---|---|---|---|")
        nested: list[tuple[type[BaseModel], str]] = []
        for name, field in model.model_fields.items():
            annotation = field.annotation
            default = "required" if field.is_required() else _default(field)
            example = _example(name, annotation, field)
            out.append(
                f"| `{name}` | {_type_text(annotation)} | {default} | {_allowed(annotation)} "
                f"| `{name}: {example}` | {_cell(meanings.get(name, ''))} |"
            )
            for inner in _models(annotation):
                nested.append((inner, f"{path}.{name}".lstrip(".")))
        out.append("")
        for inner, inner_path in nested:
            section(inner, inner_path)

    section(RunConfig, "")
    return "\n".join(out)


def _attributes(doc: str) -> dict[str, str]:
    """A Google-style docstring's ``Attributes:`` entries, by name."""
    found: dict[str, str] = {}
    block = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    current = ""
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


def _type_text(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    if text is None:
        text = str(annotation).replace("typing.", "")
        text = re.sub(r"Annotated\[([^,\[\]]+(?:\[[^\]]*\])?),[^\]]*\]", r"\1", text)
        text = re.sub(r"<class '([\w.]+)'>", r"\1", text)
        text = re.sub(r"\b(?:[a-z_]+\.)+([A-Z]\w*)", r"\1", text)
    return _cell(f"`{text}`")


def _allowed(annotation: Any) -> str:
    values = _literals(annotation)
    return ", ".join(f"`{v}`" for v in values) if values else ""


def _literals(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [v for arg in typing.get_args(annotation) for v in _literals(arg)]
    return []


def _default(field: Any) -> str:
    from pydantic import BaseModel

    if field.default_factory is not None:
        value = field.default_factory()
        return "(its defaults)" if isinstance(value, BaseModel) else f"`{value!r}`"
    return f"`{field.default!r}`"


_PLACEHOLDERS = (("float", "30"), ("Seconds", "30"), ("int", "2"), ("bool", "true"), ("list", "[]"))
"""A value to show for a key of that type that has no default (checked in order)."""


def _example(name: str, annotation: Any, field: Any) -> str:
    literals = _literals(annotation)
    plain = field.default_factory is None and field.default not in (None, "")
    if literals:
        example = json.dumps(literals[0])
    elif not field.is_required() and plain:
        example = json.dumps(field.default)
    elif _models(annotation):
        example = "{...}"
    else:
        text = str(annotation)
        example = next((shown for kind, shown in _PLACEHOLDERS if kind in text), '"..."')
    return example


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

"""Reusable helpers for experiment runners: statistics, CSV/JSON output, progress, plots.

Nothing here knows about a particular paper. Runners build their results, then call
:func:`write_csv`, :func:`write_json` and :func:`plot_error_curves`; CLIs wrap a run in
:func:`rich_progress`. Plots use matplotlib's Agg canvas directly (no pyplot, no global
backend state), so they work headless and in worker processes.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import platform
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ProgressCallback = Callable[[int, int], None]
"""progress(done, total): called by runners after each unit of work."""

ExtraPoints = Mapping[tuple[str, str, float], tuple[float, float, str]]
"""{(group, panel, x): (mean, sem, path)}: points from another code path (e.g. a real protocol run)."""


# -- statistics -----------------------------------------------------------------

def agg_figure() -> tuple[Any, Any]:
    """matplotlib's Figure and Agg canvas (no pyplot, no global state), or a clear error naming the extra."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise RuntimeError("plots need matplotlib, which the `experiments` extra installs: pip install 'mpdp[experiments]' (or pass no --plot)") from e
    return Figure, FigureCanvasAgg

def can_plot() -> bool:
    """Whether matplotlib (the `experiments` extra) is installed: without it an experiment writes its tables and no PNG."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


NO_PLOT = "no PNG written: plots need matplotlib, which the `experiments` extra installs (pip install 'mpdp[experiments]')"


def mean_sem(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Sample mean and standard error of the mean (0 for fewer than two values)."""
    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError("mean_sem needs at least one value")
    sem = float(np.std(a, ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0
    return float(np.mean(a)), sem


def parse_float_list(text: str) -> list[tuple[str, float]]:
    """'0.01,0.05' -> [('0.01', 0.01), ('0.05', 0.05)]: keeps each value as written."""
    out: list[tuple[str, float]] = []
    for raw in text.split(","):
        label = raw.strip()
        if not label:
            continue
        try:
            value = float(label)
        except ValueError as e:
            raise ValueError(f"not a number: {label!r}") from e
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {label!r}")
        out.append((label, value))
    if not out:
        raise ValueError("empty list")
    labels = [lab for lab, _ in out]
    if len(set(v for _, v in out)) != len(out):
        raise ValueError(f"duplicate values in {labels}")
    return out


# -- output files -----------------------------------------------------------------
def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def to_json(obj: Any, *, indent: int | None = 2) -> str:
    """JSON text for nested dicts/lists holding numpy scalars and arrays (NaN/inf become null)."""
    return json.dumps(_jsonable(obj), indent=indent, ensure_ascii=False, allow_nan=False)


def write_json(path: str | Path, obj: Any) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(to_json(obj) + "\n", encoding="utf-8")
    return p


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]], fieldnames: Sequence[str] | None = None) -> Path:
    """Write dict rows; the columns are ``fieldnames`` or the union of keys in first-seen order."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if fieldnames is None:
        seen: dict[str, None] = {}
        for r in rows:
            for k in r:
                seen.setdefault(k, None)
        fieldnames = list(seen)
    with p.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(fieldnames), extrasaction="raise")
        w.writeheader()
        for r in rows:
            w.writerow({k: _jsonable(v) for k, v in r.items()})
    return p


def environment() -> dict[str, str]:
    """Versions worth recording next to any result."""
    import scipy

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "platform": platform.platform(),
        "argv": " ".join(sys.argv),
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# -- progress ---------------------------------------------------------------------
@contextlib.contextmanager
def rich_progress(description: str, *, enabled: bool = True) -> Iterator[ProgressCallback]:
    """A progress bar on stderr; yields a ``progress(done, total)`` callback (no-op when disabled)."""
    if not enabled:
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


# -- plots --------------------------------------------------------------------------
@dataclass(frozen=True)
class Curve:
    """One line on a panel: y ± yerr against x."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    yerr: Sequence[float] | Sequence[Sequence[float]] | None = None  # symmetric, or (below, above) rows
    color: str | None = None
    linestyle: str = "-"
    marker: str | None = "o"
    group: str = ""  # key used to match extra points to this curve


@dataclass(frozen=True)
class Panel:
    title: str
    curves: Sequence[Curve]
    key: str = ""  # key used to match extra points to this panel
    hlines: Sequence[tuple[float, str, str | None]] = field(default_factory=tuple)  # (y, label, color)


def plot_error_curves(
    path: str | Path,
    panels: Sequence[Panel],
    *,
    xlabel: str,
    ylabel: str,
    suptitle: str = "",
    ylim: tuple[float, float] | None = None,
    extra_points: ExtraPoints | None = None,
) -> Path:
    """Side-by-side panels of error-bar curves (shared y axis), saved as PNG.

    ``extra_points`` ({(curve group, panel key, x): (mean, sem, path)}) are drawn as black stars with
    error bars on the matching panel, labelled by their path, so results from another code path
    (e.g. the real cryptographic protocol) can be overlaid on the fast-path curves.
    """
    Figure, FigureCanvasAgg = agg_figure()

    fig = Figure(figsize=(6.0 * len(panels), 5.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        for y, label, color in panel.hlines:
            ax.axhline(y, color=color or "grey", linestyle=":", linewidth=1.0, label=label)
        for c in panel.curves:
            ax.errorbar(
                list(c.x), list(c.y), yerr=None if c.yerr is None else list(c.yerr),
                label=c.label, color=c.color, linestyle=c.linestyle, marker=c.marker,
                markersize=4, capsize=3, linewidth=1.4,
            )
        if extra_points:
            seen_paths: set[str] = set()
            for (group, panel_key, x), (m, s, pth) in sorted(extra_points.items(), key=lambda kv: str(kv[0])):
                if panel_key != panel.key:
                    continue
                lab = f"{pth} ({group})" if pth not in seen_paths else None
                seen_paths.add(pth)
                ax.errorbar([x], [m], yerr=[s], color="black", marker="*", markersize=11, linestyle="none", capsize=3, label=lab)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
    handles: dict[str, Any] = {}
    for ax in axes:  # one legend for the figure: panels share their labels
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=min(4, len(handles)), fontsize=8)
    axes[0].set_ylabel(ylabel)
    if ylim is not None:
        axes[0].set_ylim(*ylim)
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=120)
    return p
